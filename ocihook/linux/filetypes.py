"""File types by st_mode: their words in messages and their short names in listings (the
one table of them: plan.kinds names the types a kind's source and mount point may be by
these short names).

Kept stdlib-free apart from `stat`: the hook imports it at every injection.
"""

from __future__ import annotations

import stat

# File types by st_mode: (words in messages, short name in listings and in KINDS, test).
FILE_TYPES = (
    ("symlink", "link", stat.S_ISLNK),
    ("directory", "dir", stat.S_ISDIR),
    ("regular file", "file", stat.S_ISREG),
    ("fifo", "fifo", stat.S_ISFIFO),
    ("socket", "sock", stat.S_ISSOCK),
    ("character device", "chr", stat.S_ISCHR),
    ("block device", "blk", stat.S_ISBLK),
)
# Short name -> its st_mode test.
TEST_BY_SHORT = {short: test for _name, short, test in FILE_TYPES}
# File type (stat.S_IFMT of st_mode) -> its short name: one dict lookup per file found.
SHORT_BY_IFMT = {
    stat.S_IFLNK: "link",
    stat.S_IFDIR: "dir",
    stat.S_IFREG: "file",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "sock",
    stat.S_IFCHR: "chr",
    stat.S_IFBLK: "blk",
}


def type_name(mode: int) -> str:
    """'regular file', 'symlink', ... (for messages)."""
    return next((name for name, _short, test in FILE_TYPES if test(mode)), "file of unknown type")


def short_type(mode: int) -> str:
    """'file', 'link', 'dir', ... (for listings); 'other' for a type Linux does not have."""
    return next((short for _name, short, test in FILE_TYPES if test(mode)), "other")


def is_type(mode: int, shorts: tuple[str, ...]) -> bool:
    """Whether the st_mode is one of the file types named (short names)."""
    return any(TEST_BY_SHORT[short](mode) for short in shorts)
