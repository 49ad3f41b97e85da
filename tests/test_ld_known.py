"""The ld cache entries kept between starts (ocihook/ld/known.py): the store round-trips and
a malformed one is read as empty; with real podman + runc containers, a second start uses
the entries of the first instead of reading the libraries again (shown by a poisoned entry
that only a start which trusted the store could meet), and a library changed on the host is
read again (its identity differs, the poisoned entry is never used)."""

from __future__ import annotations

import marshal
import os
import time

import pytest

from ocihook.ld import known
from ocihook.linux import trusted
from tests.support import synthetic

LIBSYNTH = f"libsynth.so.{synthetic.VERSION}"


def test_store_round_trips_and_a_bad_one_is_empty(tmp_path):
    state = tmp_path / "state"
    fd = trusted.open_dir(str(state), "state dir")
    try:
        assert known.load(fd) == {}  # none yet
        st = os.stat(tmp_path)
        key = known.key_of(st)
        entries = {key: (b"libx.so.1", 0x303)}
        known.save(fd, str(state), entries)
        assert known.load(fd) == entries
        assert known.entry(known.load(fd), key) == (b"libx.so.1", 0x303)
        assert oct((state / known.NAME).stat().st_mode & 0o777) == "0o600"
        for bad in (
            b"not marshal",
            marshal.dumps((known.VERSION + 1, entries)),  # another version
            marshal.dumps((known.VERSION, [key])),  # not a dict
        ):
            (state / known.NAME).write_bytes(bad)
            assert known.load(fd) == {}
        for entry in (("str", 1), (b"x",), (b"x", "1"), [b"x", 1], None):  # not an entry
            (state / known.NAME).write_bytes(marshal.dumps((known.VERSION, {key: entry})))
            assert known.entry(known.load(fd), key) is None
    finally:
        os.close(fd)


def test_a_file_changed_within_the_clock_tick_is_not_kept(tmp_path):
    """As the config cache: a file whose ctime is within RACY_SECONDS of the coarse clock
    taken before the reads may still change without its key changing: not kept."""
    path = tmp_path / "lib"
    path.write_bytes(b"x")
    key = known.key_of(os.stat(path))
    assert not known.settled(key, known.clock())
    assert known.settled(key, known.clock() + int(trusted.RACY_SECONDS * 1e9) + 10_000_000)


def _settle(path) -> None:
    """Wait until `path` changed longer ago than the store's racy window."""
    while not known.settled(known.key_of(os.stat(path)), known.clock()):
        time.sleep(0.05)


@pytest.mark.root
@pytest.mark.podman
def test_a_second_start_uses_the_first_starts_entries_until_the_file_changes(
    hook_setup, image_rhel, synth_root
):
    command = ["/usr/bin/synth-smi"]
    library = synth_root / synthetic.MULTIARCH / LIBSYNTH
    _settle(library)
    first = hook_setup.run(image_rhel, command, devices="0")
    assert first.returncode == 0, first.stderr
    assert "libsynth 1.2.3 loaded from /usr/lib64/libsynth.so.1" in first.stdout
    fd = os.open(hook_setup.state_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        stored = known.load(fd)
        key = known.key_of(os.stat(library))
        assert stored[key][0] == b"libsynth.so.1"  # DT_SONAME, read at the first start
        assert len(stored) == len(synthetic.LIBRARIES)  # the driver's library files only
        # Poison the entry: a start that trusts the store (reads no ELF) meets a soname that
        # names nothing in the lib dir and refuses the container.
        known.save(fd, str(hook_setup.state_dir), {**stored, key: (b"libpoison.so.1", 0x303)})
        second = hook_setup.run(image_rhel, command, devices="0")
        assert second.returncode != 0
        assert "DT_SONAME libpoison.so.1 names nothing in /usr/lib64" in second.stderr
        # The library changed on the host (its ctime moves): another identity, read again.
        os.utime(library)
        _settle(library)
        third = hook_setup.run(image_rhel, command, devices="0")
        assert third.returncode == 0, third.stderr
        assert "libsynth 1.2.3 loaded from /usr/lib64/libsynth.so.1" in third.stdout
        again = known.load(fd)
        assert again[known.key_of(os.stat(library))][0] == b"libsynth.so.1"
        assert key not in again  # only the last start's entries are kept
    finally:
        os.close(fd)
