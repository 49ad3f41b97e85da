"""Least privilege: drop capabilities and set no_new_privs (python-prctl)."""

from __future__ import annotations

import prctl


def drop_bounding_set(keep: tuple[int, ...] = ()) -> None:
    """Remove every capability but `keep` from the bounding set (needs CAP_SETPCAP)."""
    prctl.capbset.limit(*keep)


def clear_capabilities(keep: tuple[int, ...] = ()) -> None:
    """Keep only `keep` in the effective, permitted and inheritable sets; set no_new_privs."""
    prctl.cap_inheritable.limit()
    prctl.cap_effective.limit(*keep)
    prctl.cap_permitted.limit(*keep)
    prctl.set_no_new_privs(1)


def drop_capabilities(keep: tuple[int, ...] = ()) -> None:
    drop_bounding_set(keep)
    clear_capabilities(keep)


def effective_capabilities() -> int:
    """The CapEff mask of this process, read from /proc (for tests and debug logs)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0
