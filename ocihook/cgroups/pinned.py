"""Device programs that systemd attaches from a pin (BPFProgram=device:, crun 1.23 and later).

crun 1.23 and later, under the systemd cgroup manager, build the container's device program
themselves, pin it under /sys/fs/bpf/crun/ and name it on the container's scope
(`BPFProgram=device:PATH`, with `DevicePolicy=auto` and no `DeviceAllow=`); systemd attaches
that pinned program, and attaches it again on every `systemctl daemon-reload`. The hook's
extended copy of the attached program (v2.py) then meets crun's original beside it, and every
attached program must allow: every injected node is EPERM after a reload. crun's pin cannot
simply be replaced either: `crun update` builds a program from the update's device list and
refuses to go on ("updating device access list not supported when using BPFProgram") when it
differs from the program at its pin path, and `podman update` sends podman's own list.

So the hook leaves crun's pin as it is, pins an extended copy of each program the unit names
under PIN_DIR, and writes a runtime drop-in for the unit (UNIT_DIR/<unit>.d/DROPIN) that
replaces the unit's BPFProgram= list by those copies. From the next reload on systemd
attaches the copies (systemd cannot change BPFProgram= of a running unit over D-Bus, "Cannot
set property BPFProgram", but reads a unit's drop-ins at every reload, transient units
included); until then the copy v2.py swapped in holds the grant. A `crun update` finds its own
pin unchanged. The pins and the drop-in go after the container's unit is gone (`sweep`, at
the next injection that pins: no process runs when a container stops), or at once on a
rollback or at a poststop stage where an admin registered one (`remove`).
Measured with crun 1.28, systemd 262 and podman 5.8.6 (docs/cgroups.md).
"""

from __future__ import annotations

import os

from ocihook.cgroups import bpf
from ocihook.errors import OcihookError
from ocihook.plan.devrules import DeviceRule

PIN_DIR = "/sys/fs/bpf/ocihook"
UNIT_DIR = "/run/systemd/system"  # systemd's runtime unit dir: drop-ins read at every reload
TRANSIENT_DIR = "/run/systemd/transient"  # a transient unit's file, removed with the unit
DROPIN = "50-ocihook-devices.conf"
_SECTION = {".scope": "Scope", ".service": "Service", ".slice": "Slice"}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def pin_names(unit: str, count: int) -> list[str]:
    """Our pins' file names for a unit's `count` device programs: the unit name with '.' as
    '_' (as crun names its own), then '-1', '-2', ... for a second and later program."""
    _check_unit(unit)
    base = unit.replace(".", "_")
    return [base if i == 0 else f"{base}-{i}" for i in range(count)]


def dropin_text(unit: str, programs: list[tuple[str, str]], ours: dict[str, str]) -> str:
    """The drop-in: the unit's BPFProgram= list reset, then each entry again, a device
    program replaced by our pin (`ours`: its path -> our pin's path)."""
    section = _section(unit)
    lines = [
        f"# Written by ocihook for the container's devices ({__name__}); removed with it.",
        f"[{section}]",
        "BPFProgram=",
    ]
    for kind, path in programs:
        lines.append(f"BPFProgram={kind}:{ours.get(path, path) if kind == 'device' else path}")
    return "\n".join(lines) + "\n"


def extend(
    unit: str, programs: list[tuple[str, str]], rules: list[DeviceRule]
) -> tuple[list[str], str]:
    """Pin an extended copy of each device program the unit names and write the drop-in
    that names the copies; returns (our pin paths, the drop-in's path). OcihookError (one
    line) when a program cannot be read, loaded or pinned, or the drop-in written: what was
    made by then is removed again."""
    device_paths = [path for kind, path in programs if kind == "device"]
    names = pin_names(unit, len(device_paths))
    prefix = bpf.allow_prefix(rules)
    pins: list[str] = []
    try:
        pin_dir = _open_pin_dir()
        try:
            for path, name in zip(device_paths, names):
                _pin_extended(pin_dir, name, path, prefix, unit)
                pins.append(f"{PIN_DIR}/{name}")
        finally:
            os.close(pin_dir)
        ours = dict(zip(device_paths, pins))
        dropin = _write_dropin(unit, dropin_text(unit, programs, ours))
    except BaseException:
        remove(unit)
        raise
    return pins, dropin


def remove(unit: str) -> list[str]:
    """Remove the unit's pins and drop-in (best effort); returns what could not be removed."""
    _check_unit(unit)
    failed = []
    base = unit.replace(".", "_")
    try:
        names = os.listdir(PIN_DIR)
    except OSError:
        names = []
    for name in names:
        if name == base or (name.startswith(base + "-") and name[len(base) + 1 :].isdigit()):
            try:
                os.unlink(f"{PIN_DIR}/{name}")
            except FileNotFoundError:
                pass
            except OSError as error:
                failed.append(f"{PIN_DIR}/{name}: {error.strerror}")
    directory = f"{UNIT_DIR}/{unit}.d"
    try:
        os.unlink(f"{directory}/{DROPIN}")
    except FileNotFoundError:
        pass
    except OSError as error:
        failed.append(f"{directory}/{DROPIN}: {error.strerror}")
    try:
        os.rmdir(directory)
    except OSError:
        pass  # absent, or holds other drop-ins
    return failed


def sweep() -> list[str]:
    """Remove the pins and drop-ins of units that are gone (their transient unit file is,
    systemd deletes it when it frees the unit): containers that have stopped (the shipped
    registration has no poststop stage). Returns the units swept."""
    try:
        names = os.listdir(UNIT_DIR)
    except OSError:
        return []
    swept = []
    for name in names:
        if not name.endswith(".d") or not os.path.exists(f"{UNIT_DIR}/{name}/{DROPIN}"):
            continue
        unit = name[: -len(".d")]
        if os.path.lexists(f"{TRANSIENT_DIR}/{unit}"):
            continue
        try:
            remove(unit)
        except OcihookError:
            continue
        swept.append(unit)
    return swept


def _check_unit(unit: str) -> None:
    if not unit or "/" in unit or unit.startswith(".") or "\0" in unit:
        raise OcihookError(f"systemd unit name {unit!r} is not one file name")
    _section(unit)


def _section(unit: str) -> str:
    for suffix, section in _SECTION.items():
        if unit.endswith(suffix):
            return section
    raise OcihookError(f"systemd unit {unit!r} is not a scope, service or slice")


def _open_pin_dir() -> int:
    """PIN_DIR, made (0700) in the bpf file system if needed, opened without following
    links; a pin outside a bpf file system fails at BPF_OBJ_PIN (EPERM)."""
    try:
        os.mkdir(PIN_DIR, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise OcihookError(f"cannot make {PIN_DIR}: {error.strerror}") from None
    try:
        fd = os.open(PIN_DIR, _DIR_FLAGS)
    except OSError as error:
        raise OcihookError(f"cannot open {PIN_DIR}: {error.strerror}") from None
    st = os.fstat(fd)
    if st.st_uid != 0 or st.st_mode & 0o022:
        os.close(fd)
        raise OcihookError(f"{PIN_DIR} is not a directory only root may write")
    return fd


def _pin_extended(pin_dir: int, name: str, source: str, prefix: list, unit: str) -> None:
    """Load our rules + the program pinned at `source`, and pin it as `name` in PIN_DIR."""
    from ocihook.cgroups import v2

    what = f"systemd unit {unit}: BPFProgram=device:{source}"
    try:
        fd = bpf.obj_get(source)
    except bpf.BpfError as error:
        raise OcihookError(f"{what}: cannot open the pinned program: {error.strerror}") from None
    try:
        info = bpf.prog_info(fd)
    except bpf.BpfError as error:
        os.close(fd)
        raise OcihookError(f"{what}: cannot read the program: {error.strerror}") from None
    os.close(fd)
    insns = v2.reloadable_insns(info, what)
    license = "GPL" if info.gpl_compatible else "Apache"
    try:
        new_fd = bpf.prog_load(prefix + insns, license)
    except bpf.BpfError as error:
        raise OcihookError(
            f"{what}: kernel refused the extended program: {error.strerror}"
        ) from None
    try:
        target = f"{PIN_DIR}/{name}"
        try:
            os.unlink(name, dir_fd=pin_dir)  # a second prestart run of the same container
        except FileNotFoundError:
            pass
        try:
            bpf.obj_pin(new_fd, target)
        except bpf.BpfError as error:
            raise OcihookError(f"{what}: cannot pin {target}: {error.strerror}") from None
    finally:
        os.close(new_fd)


def _write_dropin(unit: str, text: str) -> str:
    """UNIT_DIR/<unit>.d/DROPIN, written through a temporary file and a rename."""
    try:
        base = os.open(UNIT_DIR, _DIR_FLAGS)
    except OSError as error:
        raise OcihookError(f"cannot open {UNIT_DIR}: {error.strerror}") from None
    name = f"{unit}.d"
    try:
        try:
            os.mkdir(name, 0o755, dir_fd=base)
        except FileExistsError:
            pass
        directory = os.open(name, _DIR_FLAGS, dir_fd=base)
    except OSError as error:
        os.close(base)
        raise OcihookError(f"cannot make {UNIT_DIR}/{name}: {error.strerror}") from None
    os.close(base)
    temp = f".{DROPIN}.{os.getpid()}"
    path = f"{UNIT_DIR}/{name}/{DROPIN}"
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o644, dir_fd=directory)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, DROPIN, src_dir_fd=directory, dst_dir_fd=directory)
    except OSError as error:
        try:
            os.unlink(temp, dir_fd=directory)
        except OSError:
            pass  # never created
        raise OcihookError(f"cannot write {path}: {error.strerror}") from None
    finally:
        os.close(directory)
    return path
