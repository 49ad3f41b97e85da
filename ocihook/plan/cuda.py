"""CUDA images on an NVIDIA host: forward compatibility, and the driver -> CUDA table.

Forward compatibility (NVIDIA's rule, nvidia-container-toolkit's current enable-cuda-compat
hook): the image's `<compat_dir>/libcuda.so.*.*` (exactly one regular file) names a driver
version. Where the library carries NVIDIA's `.note.cuda.fwd_compatibility` note (an ELF note
of "NVIDIA Corporation" whose JSON lists the driver branches the package serves, `driver`,
and its CUDA version), the compat dir comes first in the container's ld cache when the host
driver's branch is listed there and the library's version is newer than the host driver's
(575.57.08 on 575.51.03: yes; on 470: no). Where it carries none (or an unreadable one), the
driver branches (majors) are compared, as that hook does then and libnvidia-container's
legacy filter always does. The plan says which rule decided (`rule`: note or branch).

The image is hostile input: the dir is resolved inside its root by fd, listed with a bound,
the library opened without following links or blocking (a FIFO, a device node) and only its
ELF headers and that note read (bounded; elf.py); nothing of it is mounted, loaded or run.

The host's CUDA version comes from the driver version by NVIDIA's table (CUDA_BY_DRIVER);
the requirement check (NVIDIA_REQUIRE_*) is plan/require.py's.
"""

from __future__ import annotations

import os
import stat
import struct

from ocihook.errors import describe
from ocihook.ld import elf
from ocihook.linux import securepath

COMPAT_MODES = ("ldconfig", "hook", "disabled")  # NVIDIA's cuda-compat-mode, as supported
NOTE_SECTION = b".note.cuda.fwd_compatibility"
NOTE_OWNER = b"NVIDIA Corporation"
RULE_NOTE = "note"  # the library's note decided (the branches it lists, then the versions)
RULE_BRANCH = "branch"  # no (readable) note: the driver branches (majors) compared
_NHDR = struct.Struct("<III")  # Elf_Nhdr: namesz, descsz, type
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK

# The oldest Linux driver of each CUDA release (NVIDIA's CUDA Toolkit release notes, "CUDA
# Toolkit and Corresponding Driver Versions"; 590.44.01's CUDA 13.1 as its own compat
# library's note states it): a driver reports the CUDA version of the newest release whose
# minimum it meets. Newest first.
CUDA_BY_DRIVER = (
    ((590, 44, 1), "13.1"),
    ((580, 65, 6), "13.0"),
    ((575, 51, 3), "12.9"),
    ((570, 26), "12.8"),
    ((565, 57, 1), "12.7"),
    ((560, 28, 3), "12.6"),
    ((555, 42, 2), "12.5"),
    ((550, 54, 14), "12.4"),
    ((545, 23, 6), "12.3"),
    ((535, 54, 3), "12.2"),
    ((530, 30, 2), "12.1"),
    ((525, 60, 13), "12.0"),
    ((520, 61, 5), "11.8"),
    ((515, 43, 4), "11.7"),
    ((510, 39, 1), "11.6"),
    ((495, 29, 5), "11.5"),
    ((470, 42, 1), "11.4"),
    ((465, 19, 1), "11.3"),
    ((460, 27, 3), "11.2"),
    ((455, 23), "11.1"),
    ((450, 36, 6), "11.0"),
    ((440, 33), "10.2"),
    ((418, 39), "10.1"),
    ((410, 48), "10.0"),
    ((396, 26), "9.2"),
    ((390, 46), "9.1"),
    ((384, 81), "9.0"),
    ((375, 26), "8.0"),
)


def parse_version(text: str) -> tuple[int, ...] | None:
    """(major, minor, patch) of `470`, `12.2` or `535.104.05` (leading zeros as NVIDIA's
    driver versions have them), zeros filled in; None: no such version."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and p.isascii() for p in parts):
        return None
    numbers = tuple(int(p) for p in parts)
    return numbers + (0,) * (3 - len(numbers))


def cuda_for_driver(driver_version: str | None) -> str | None:
    """The CUDA version a driver supports (CUDA_BY_DRIVER); None when the table cannot tell
    (no version, or a branch newer than its newest)."""
    version = parse_version(driver_version or "")
    if version is None or version[0] > CUDA_BY_DRIVER[0][0][0]:
        return None
    for minimum, cuda in CUDA_BY_DRIVER:
        if version >= minimum + (0,) * (3 - len(minimum)):
            return cuda
    return None


# Forward compatibility


def compat_result(mode: str, directory: str, host: str | None, reason: str, **found) -> dict:
    """The plan's cuda_compat entry: not used unless `found` says otherwise."""
    result = {
        "mode": mode,
        "dir": directory,
        "use": False,
        "library": None,
        "version": None,
        "host_version": host,
        "rule": None,
        "note": None,
        "reason": reason,
    }
    result.update(found)
    return result


def probe_compat(
    root_fd: int, directory: str, base: str, mode: str, host_version: str | None
) -> dict:
    """The forward compatibility decision for the image whose root is `root_fd` (its
    compat dir `directory`, library `base`, libcuda.so): a dict (mode, dir, use, library,
    version, host_version, rule, note, reason) for the plan (plan.decide's pending one,
    decided)."""

    def decided(reason: str, **found) -> dict:
        return compat_result(mode, directory, host_version, reason, **found)

    host = parse_version(host_version or "")
    if host is None:
        return decided(f"the host driver version is unknown ({host_version})")
    try:
        dir_fd = securepath.resolve(root_fd, directory, flags=_DIR_FLAGS)
    except OSError as error:
        return decided(f"{directory}: {describe(error)}")
    try:
        found = _compat_library(root_fd, dir_fd, directory, base)
    finally:
        os.close(dir_fd)
    if isinstance(found, str):
        return decided(found)
    name, version, note = found
    numbers = parse_version(version)
    if numbers is None:
        return decided(f"{name}: no driver version in its name")
    use, reason = decide_compat(name, numbers, host, host_version or "", note)
    rule = RULE_NOTE if isinstance(note, dict) else RULE_BRANCH
    return decided(
        reason,
        use=use,
        library=name,
        version=version,
        rule=rule,
        note=note if isinstance(note, dict) else None,
    )


def decide_compat(
    name: str,
    version: tuple[int, ...],
    host: tuple[int, ...],
    host_version: str,
    note: dict | str | None,
) -> tuple[bool, str]:
    """(use the compat library, why): NVIDIA's rule (the module's docstring) for the library
    `name` of `version` on the host driver `host` (`host_version` as written), `note` its
    fwd_compatibility note (parse_note's: a dict, None for none, a reason when unreadable)."""
    newer = version > host
    if isinstance(note, dict):
        branches = note["drivers"]
        listed = ", ".join(map(str, branches)) or "none"
        if host[0] not in branches:
            return False, (
                f"{name}: its note lists driver branches {listed}, not the host's "
                f"{host[0]} (driver {host_version})"
            )
        if not newer:
            return False, f"{name} not newer than driver {host_version} (its note lists {host[0]})"
        return True, f"{name} newer than driver {host_version}, whose branch its note lists"
    why = "no forward compatibility note" if note is None else f"its note: {note}"
    if version[0] > host[0]:
        return True, f"{name} of a newer branch than driver {host_version} ({why})"
    return False, f"{name} not of a newer branch than driver {host_version} ({why})"


def parse_note(data: bytes, align: int) -> dict | str | None:
    """NVIDIA's fwd_compatibility note as {"cuda": "12.9" | None, "drivers": [535, ...]};
    None when it is no note of NVIDIA's (empty, another owner: the hook's fallback then
    applies, as for no note); a reason when its JSON cannot be read (the same fallback).
    The JSON's keys are matched without case (Go's encoding/json: `CUDA version`)."""
    if len(data) < _NHDR.size:
        return "truncated"
    namesz, descsz, _type = _NHDR.unpack_from(data)
    if namesz == 0 or descsz == 0:
        return None
    step = max(align, 1)
    name_end = _NHDR.size + -(-namesz // step) * step
    if data[_NHDR.size : _NHDR.size + namesz].strip(b"\0") != NOTE_OWNER:
        return None
    desc = data[name_end : name_end + descsz].strip(b"\0")
    from ocihook import fastjson

    try:
        parsed = fastjson.loads(desc)
    except (ValueError, UnicodeDecodeError):
        return "invalid JSON"
    if not isinstance(parsed, dict):
        return "not a JSON object"
    fields = {str(key).lower(): value for key, value in parsed.items()}
    for key in ("driver", "device"):
        if fields.get(key) is not None and not _int_list(fields[key]):
            return f"its {key} list is no list of whole numbers"
    if fields.get("format") is not None and not _is_int(fields["format"]):
        return "its format is no whole number"
    cuda = fields.get("cuda version")
    if cuda is not None and not isinstance(cuda, str):
        return "its CUDA version is no string"
    return {"cuda": cuda, "drivers": list(fields.get("driver") or [])[:64]}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_list(value: object) -> bool:
    return isinstance(value, list) and all(_is_int(v) for v in value)


def _compat_library(
    root_fd: int, dir_fd: int, directory: str, base: str
) -> tuple[str, str, dict | str | None] | str:
    """(file name, version, its note: parse_note's) of the one compat library in the dir,
    or why there is none."""
    prefix = base + "."
    candidates = []
    try:
        with os.scandir(dir_fd) as entries:
            for count, entry in enumerate(entries):
                if count >= elf.MAX_DIR_ENTRIES:
                    return f"{directory}: more than {elf.MAX_DIR_ENTRIES} entries"
                rest = entry.name[len(prefix) :] if entry.name.startswith(prefix) else ""
                if "." in rest:  # NVIDIA's glob: libcuda.so.*.*
                    candidates.append(entry.name)
    except OSError as error:
        return f"{directory}: {describe(error)}"
    if not candidates:
        return f"no {prefix}*.* in {directory}"
    regular = []
    for name in sorted(candidates)[:16]:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            regular.append(name)
    if len(regular) != 1:
        what = ", ".join(sorted(candidates)[:4])
        if not regular:
            return f"{directory}: {what}: not a regular file"
        return f"{directory}: {len(regular)} compat libraries ({what}): NVIDIA's rule takes one"
    name = regular[0]
    checked = _check_library(root_fd, dir_fd, directory, name, f"{base}.1")
    if isinstance(checked, str):
        return f"{directory}/{name}: {checked}"
    return name, name[len(prefix) :], checked[0]


def _check_library(root_fd: int, dir_fd: int, directory: str, name: str, soname: str):
    """(its note: parse_note's,) when `name` (in the dir) is a 64-bit ELF shared library
    with DT_SONAME `soname` whose soname link the dir has; else why it is not one. Read by
    fd, headers and the note only."""
    fd = elf.open_regular(dir_fd, name)
    if isinstance(fd, str):
        return fd
    try:
        found = elf.read_fd(fd)
        section = elf.note_section(fd, NOTE_SECTION) if not isinstance(found, str) else None
    finally:
        os.close(fd)
    if isinstance(found, str):
        return found
    if found.elfclass != elf.ELFCLASS64:
        return "not a 64-bit library"
    if found.soname != soname.encode():
        return f"DT_SONAME {found.soname!r}, not {soname}"
    try:  # the loader's path: the soname link, resolved inside the image's root
        link = securepath.resolve(root_fd, f"{directory}/{soname}")
    except OSError as error:
        return f"{soname}: {describe(error)}"
    try:
        if not stat.S_ISREG(os.fstat(link).st_mode):
            return f"{soname}: not a regular file"
    finally:
        os.close(link)
    if isinstance(section, tuple):
        return (parse_note(*section),)
    return (section,)  # None: no note; a reason: its section headers could not be read
