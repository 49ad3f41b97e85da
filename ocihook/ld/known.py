"""What the native ld cache writer read of the driver's libraries, kept between starts.

Every container start that injects a driver writes the container's ld.so.cache from the
image's cache plus one entry per injected library (ld/native.py), which needs each library's
DT_SONAME and ELF class and machine: about 20 us of reads per library in the container (a
millisecond for a driver of fifty). Those are facts of the host's files, the same at every
start, so the hook keeps the entries it read in the state dir (`NAME`, root's, 0600, through
linux.trusted like the records), keyed by the identity of the source file that was mounted:
its device, inode, size, mtime and ctime, from the fstat of the very fd that was cloned and
attached (a file changed in any way, replaced or rewritten, has another key and is read
again). As for the config cache (config/compiled.py), a file whose ctime is not at least
linux.trusted.RACY_SECONDS below the coarse clock taken before the reads is not kept: file
times move by the clock tick, so a same-size rewrite in the tick of the read would keep the
key. Only entries that were read whole and accepted are kept, and only those of the last
start (bounded by the driver's size). A missing, unreadable or malformed store is read as
empty: the writer then reads every library, as without it. The image's own cache and files
are never kept: they are read by fd at every start.
"""

from __future__ import annotations

import marshal
import time

from ocihook.errors import OcihookError
from ocihook.linux import trusted

NAME = ".ld-known"  # in the state dir: a dot file, never taken for a record
MAX_BYTES = 1 << 20
VERSION = 1

# (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns) -> (DT_SONAME, ld.so.cache flags)
Key = tuple
Entry = tuple


def key_of(st) -> Key:
    """The identity of a source file, from its fstat."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def clock() -> int:
    """The coarse clock file times come from (ns): taken before the reads, for `settled`."""
    return time.clock_gettime_ns(trusted.CLOCK_REALTIME_COARSE)


def settled(key: Key, before: int) -> bool:
    """Whether a file of this key had its last change well before `before` (a `clock()`)."""
    return key[4] <= before - trusted.RACY_SECONDS * 1e9


def load(state_fd: int) -> dict:
    """The stored entries as read ({} when there is no usable store); look them up with
    `entry`, which checks the shape of what it returns."""
    data = trusted.read_file(state_fd, NAME, MAX_BYTES + 1)
    if not data or len(data) > MAX_BYTES:
        return {}
    try:
        version, entries = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return {}
    if version != VERSION or not isinstance(entries, dict):
        return {}
    return entries


def entry(stored: dict, key: Key) -> Entry | None:
    """The stored entry of `key` (a key_of tuple), or None when there is none or it is not
    a (DT_SONAME, flags) pair."""
    found = stored.get(key)
    if (
        isinstance(found, tuple)
        and len(found) == 2
        and isinstance(found[0], bytes)
        and type(found[1]) is int
    ):
        return found
    return None


def save(state_fd: int, state_dir: str, entries: dict[Key, Entry]) -> None:
    """Replace the store with `entries` (best effort: a full disk costs the next start the
    reads, nothing else)."""
    data = marshal.dumps((VERSION, entries))
    if len(data) > MAX_BYTES:
        return
    try:
        trusted.write_file(state_fd, state_dir, NAME, data, "ld cache entries")
    except OcihookError:
        pass
