"""Shell-style name patterns (`*`, `?`, `[...]`) as the profiles and ld.so.conf's
`include` use them: the one matcher, without `re` (its import costs ms at every container
start), shared by discovery (discover/roots.py's listings) and ld/conf.py."""

from __future__ import annotations


def is_glob(pattern: str) -> bool:
    return "*" in pattern or "?" in pattern or "[" in pattern


def glob_match(name: str, pattern: str) -> bool:
    """fnmatch without `re` (its import costs ms at every container start): `*` and `?`;
    patterns with `[...]` classes go to fnmatch."""
    if "[" in pattern:
        import fnmatch

        return fnmatch.fnmatchcase(name, pattern)
    if "?" not in pattern:  # stars only, the profiles' kind ("libfoo.so.*", "lib*-x.so.*")
        if "*" not in pattern:
            return name == pattern
        head, *middle, tail = pattern.split("*")
        end = len(name) - len(tail)
        if end < len(head) or not name.startswith(head) or not name.endswith(tail):
            return False
        at = len(head)
        for part in middle:  # leftmost fit of each part leaves the most room for the rest
            at = name.find(part, at, end)
            if at < 0:
                return False
            at += len(part)
        return True
    n = p = 0
    star, mark = -1, 0
    while n < len(name):
        if p < len(pattern) and pattern[p] in ("?", name[n]):
            n += 1
            p += 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark = p, n
            p += 1
        elif star >= 0:
            p = star + 1
            mark += 1
            n = mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)
