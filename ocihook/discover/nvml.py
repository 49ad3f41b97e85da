"""Ask NVML (NVIDIA's management library, `libnvidia-ml.so.1` of the driver) which GPUs and
MIG devices the host has, in a forked child with a time limit.

Loading the driver's library into the hook process would run the driver's code as host
root with every capability, and a ctypes call cannot be interrupted: a hung driver would
hang the container start past any timeout. So the library is opened by fd inside the
source root (the driver: trusted like the host's driver) by the caller, and loaded only in
a child that first:

- leaves its own process group (the parent kills the whole group at the time limit);
- points stdin, stdout and stderr at /dev/null and closes every other fd but the library
  and the answer pipe (no container, config or state fd reaches the driver's code);
- drops every capability (effective, permitted, inheritable, ambient; the bounding set where
  it may: a user running `ocihook plan` has no capability to drop there) and sets
  no_new_privs, so that nothing it executes regains one; it keeps uid 0, which
  opening the GPU's nodes (`/dev/nvidiactl`, `/dev/nvidia-caps/*`: root's, often 0600 or
  0400) needs, but without CAP_DAC_OVERRIDE it may open only what root owns or anyone may;
- no core dump (the driver's memory stays out of the crash handler's hands).

The child writes plain text lines, which the parent validates field by field (numbers in
range, UUIDs in NVIDIA's form, a bounded size) before any of it is used:

    gpu NVML_INDEX MINOR UUID|- MIG(0|1)
    facts NVML_INDEX BRAND|- ARCH|-        (nvmlBrandType_t number, compute capability M.m)
    mig NVML_INDEX MIG_INDEX UUID|- GI CI
    cuda VERSION|-                          (the driver's CUDA version, 1000 * major + 10 * minor)
    ok                                     (or: error TEXT)

and, only when asked for detail (`ocihook features`, the exporter; never the hook):

    detail NVML_INDEX MEMORY_BYTES|- MIG_CAPABLE(0|1) NAME   (NAME: the rest of the line)
    profile NVML_INDEX MIG_INDEX GI_SLICES CI_SLICES MEMORY_MIB   (a MIG device's size)

A GPU's brand and compute capability and the driver's CUDA version are what NVIDIA's
requirement check (NVIDIA_REQUIRE_*: plan/require.py) reads; NVML that cannot tell them
answers `-` (unknown), never an error.

NVML calls used (the stand-in in tests/support/nvml_standin.c implements exactly these):
nvmlInit_v2, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetMinorNumber,
nvmlDeviceGetUUID, nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount,
nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetGpuInstanceId,
nvmlDeviceGetComputeInstanceId, nvmlDeviceGetBrand, nvmlDeviceGetCudaComputeCapability,
nvmlSystemGetCudaDriverVersion, nvmlErrorString, nvmlShutdown; with detail also
nvmlDeviceGetName, nvmlDeviceGetMemoryInfo and nvmlDeviceGetAttributes_v2 (of MIG devices).
"""

from __future__ import annotations

import os
import select
import signal
import time

from ocihook.errors import OcihookError
from ocihook.request.names import GPU_PREFIX, MIG_PREFIX, uuid_name
from ocihook.structs import Struct

MAX_ANSWER = 1 << 16
MAX_GPUS = 64
MAX_MIG = 64  # MIG devices per GPU (7 on an A100/H100; NVML's index bound)
MAX_ID = 1 << 16
UUID_BUFFER = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE
NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NOT_FOUND = 0, 3, 6
NVML_DEVICE_MIG_ENABLE = 1
# nvmlBrandType_t, by number, as the words CUDA images' NVIDIA_REQUIRE_CUDA name brands by
# (brand=tesla, brand=nvidiartx, ...); a number NVML adds later reads as unknown.
BRANDS = (
    "unknown",
    "quadro",
    "tesla",
    "nvs",
    "grid",
    "geforce",
    "titan",
    "vapps",
    "vpc",
    "vcs",
    "vws",
    "cloudgaming",
    "quadrortx",
    "nvidiartx",
    "nvidia",
    "geforcertx",
    "titanrtx",
)
MAX_BRAND = 255
MAX_CUDA = 1 << 20
NAME_BUFFER = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE
MAX_MEMORY = 1 << 50  # bytes: a GPU's memory is far below a PiB
MAX_SLICES = 64


class MigInfo(Struct):
    """One MIG device as NVML names it: its index on its GPU, UUID, GPU and compute
    instance ids."""

    __slots__ = ("index", "uuid", "gi", "ci", "profile")
    _defaults = {"profile": None}
    index: int
    uuid: str | None
    gi: int
    ci: int
    profile: str | None  # NVIDIA's name of its size ("1g.10gb"), asked with detail only


class GpuInfo(Struct):
    """One GPU as NVML names it: NVML's index, the minor of its /dev/nvidiaN, UUID, whether
    MIG is enabled, its MIG devices in NVML's order, its brand (BRANDS' word) and compute
    capability ("9.0"; None: NVML could not tell)."""

    __slots__ = (
        "index",
        "minor",
        "uuid",
        "mig_enabled",
        "mig",
        "brand",
        "arch",
        "name",
        "memory",
        "mig_capable",
    )
    _defaults = {"brand": None, "arch": None, "name": None, "memory": None, "mig_capable": None}
    index: int
    minor: int
    uuid: str | None
    mig_enabled: bool
    mig: list[MigInfo]
    brand: str | None
    arch: str | None
    name: str | None  # the product name ("NVIDIA H100 80GB HBM3"); detail only
    memory: int | None  # bytes of memory; detail only
    mig_capable: bool | None  # whether it supports MIG at all; detail only


class Answer(Struct):
    """NVML's answer: the GPUs in NVML's order and the driver's CUDA version ("12.4"; None:
    NVML could not tell)."""

    __slots__ = ("gpus", "cuda")
    gpus: list[GpuInfo]
    cuda: str | None


def brand_name(number: int) -> str:
    """The word of an nvmlBrandType_t number (BRANDS), unknown past the table."""
    return BRANDS[number] if 0 <= number < len(BRANDS) else "unknown"


def query(library_fd: int, timeout: float, where: str, detail: bool = False) -> Answer:
    """The host's GPUs and MIG devices (and the facts NVIDIA's requirement check reads) from
    the NVML library open at `library_fd` (`where` names it in messages), asked in a
    sandboxed child that is killed after `timeout` seconds; any failure is one
    OcihookError line. `detail`: also each GPU's name, memory, MIG capability and its MIG
    devices' sizes (node labels and metrics; the hook never asks)."""
    devnull = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(library_fd, write_end, read_end, devnull, detail)
        os.close(write_end)
        write_end = -1
        try:
            os.setpgid(pid, pid)  # as the child does: whoever runs first
        except OSError:
            pass  # it already has (or has exited)
        text, finished = _read_answer(read_end, pid, timeout)
    finally:
        os.close(read_end)
        os.close(devnull)
        if write_end >= 0:
            os.close(write_end)
    if not finished:
        raise OcihookError(
            f"NVML {where}: no answer within {timeout:g} s (the child was killed); "
            "is the driver hung or a GPU initializing?"
        )
    return parse_answer(text, where)


def _read_answer(fd: int, pid: int, timeout: float) -> tuple[bytes, bool]:
    """The child's answer and whether it ended ("ok" or "error" line) in time; the child's
    process group is killed and reaped either way."""
    deadline = time.monotonic() + timeout
    data = b""
    finished = False
    try:
        while len(data) <= MAX_ANSWER:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                finished = True  # EOF: the child is done (or died: parse_answer says)
                break
            data += chunk
            last = data[:-1].rsplit(b"\n", 1)[-1]
            if data.endswith(b"\n") and (last == b"ok" or last.startswith(b"error ")):
                finished = True
                break
    finally:
        _kill_and_reap(pid)
    return data, finished


def _kill_and_reap(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except OSError:
            pass
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return


def parse_answer(text: bytes, where: str) -> Answer:
    """The child's lines, validated; OcihookError on an error line or anything malformed."""

    def bad(why: str) -> OcihookError:
        return OcihookError(f"NVML {where}: malformed answer ({why})")

    if len(text) > MAX_ANSWER:
        raise bad("too long")
    try:
        lines = text.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise bad("not ASCII") from None
    if lines and lines[-1] == "":
        lines.pop()
    gpus: dict[int, GpuInfo] = {}
    cuda: str | None = None
    for line in lines:
        fields = line.split(" ")
        if fields[0] == "error":
            message = "".join(c for c in line[6:] if c.isprintable())[:200]
            raise OcihookError(f"NVML {where}: {message}")
        if fields[0] == "ok" and len(fields) == 1 and line is lines[-1]:
            return Answer(list(gpus.values()), cuda)
        if fields[0] == "facts" and len(fields) == 4:
            index = _number(fields[1], MAX_GPUS)
            brand = None if fields[2] == "-" else _number(fields[2], MAX_BRAND + 1)
            arch = _arch(fields[3])
            if index not in gpus or (brand is None and fields[2] != "-") or arch is False:
                raise bad(f"line {line[:80]!r}")
            gpus[index] = gpus[index].replace(
                brand=None if brand is None else brand_name(brand), arch=arch
            )
            continue
        if fields[0] == "detail" and len(fields) >= 5:
            index = _number(fields[1], MAX_GPUS)
            memory = None if fields[2] == "-" else _big_number(fields[2], MAX_MEMORY)
            name = " ".join(fields[4:])
            if (
                index not in gpus
                or (memory is None and fields[2] != "-")
                or fields[3] not in ("0", "1")
                or not (0 < len(name) < NAME_BUFFER and name.isascii() and name.isprintable())
            ):
                raise bad(f"line {line[:80]!r}")
            gpus[index] = gpus[index].replace(
                name=name, memory=memory, mig_capable=fields[3] == "1"
            )
            continue
        if fields[0] == "profile" and len(fields) == 6:
            gpu, mig = _number(fields[1], MAX_GPUS), _number(fields[2], MAX_MIG)
            gi, ci = _number(fields[3], MAX_SLICES), _number(fields[4], MAX_SLICES)
            size = _big_number(fields[5], MAX_MEMORY >> 20)
            owner = gpus.get(gpu) if gpu is not None else None
            found = [m for m in owner.mig if m.index == mig] if owner else []
            if None in (gi, ci, size) or not found or not gi or not ci or not owner.memory:
                raise bad(f"line {line[:80]!r}")
            found[0].profile = mig_profile(gi, ci, size, owner.memory)
            continue
        if fields[0] == "cuda" and len(fields) == 2:
            number = None if fields[1] == "-" else _number(fields[1], MAX_CUDA)
            if number is None and fields[1] != "-":
                raise bad(f"line {line[:80]!r}")
            cuda = None if number is None else f"{number // 1000}.{number % 1000 // 10}"
            continue
        if fields[0] == "gpu" and len(fields) == 5:
            index, minor = _number(fields[1], MAX_GPUS), _number(fields[2], 256)
            uuid = _uuid(fields[3], GPU_PREFIX)
            if None in (index, minor, uuid) or fields[4] not in ("0", "1") or index in gpus:
                raise bad(f"line {line[:80]!r}")
            gpus[index] = GpuInfo(index, minor, uuid or None, fields[4] == "1", [])
        elif fields[0] == "mig" and len(fields) == 6:
            gpu, mig = _number(fields[1], MAX_GPUS), _number(fields[2], MAX_MIG)
            uuid = _uuid(fields[3], MIG_PREFIX)
            gi, ci = _number(fields[4], MAX_ID), _number(fields[5], MAX_ID)
            if None in (gpu, mig, uuid, gi, ci) or gpu not in gpus:
                raise bad(f"line {line[:80]!r}")
            gpus[gpu].mig.append(MigInfo(mig, uuid or None, gi, ci))
        else:
            raise bad(f"line {line[:80]!r}")
    raise OcihookError(f"NVML {where}: the child ended without an answer (it crashed)")


def _arch(text: str) -> str | None | bool:
    """A compute capability "M.m" (each at most two digits), None for "-", False when
    malformed."""
    if text == "-":
        return None
    major, dot, minor = text.partition(".")
    if dot and all(0 < len(p) <= 2 and p.isascii() and p.isdigit() for p in (major, minor)):
        return f"{int(major)}.{int(minor)}"
    return False


def mig_profile(gi_slices: int, ci_slices: int, memory_mib: int, total_bytes: int) -> str:
    """NVIDIA's name of a MIG device's size, as its tools and GPU feature discovery write it
    (go-nvlib's rule): `<G>g.<GB>gb`, or `<C>c.<G>g.<GB>gb` when the compute instance has
    fewer slices than its GPU instance; GB is the device's share of the GPU's memory,
    rounded up to eighths, times the GPU's memory in whole GB (rounded up)."""
    import math

    share = math.ceil(memory_mib * (1 << 20) / total_bytes * 8) / 8
    total_gb = (total_bytes + (1 << 30) - 1) >> 30
    gb = int(share * total_gb + 0.5)
    if ci_slices == gi_slices:
        return f"{gi_slices}g.{gb}gb"
    return f"{ci_slices}c.{gi_slices}g.{gb}gb"


def _big_number(text: str, bound: int) -> int | None:
    if 0 < len(text) <= 20 and text.isascii() and text.isdigit() and int(text) < bound:
        return int(text)
    return None


def _number(text: str, bound: int) -> int | None:
    if 0 < len(text) <= 5 and text.isascii() and text.isdigit() and int(text) < bound:
        return int(text)
    return None


def _uuid(text: str, prefix: str) -> str | None:
    """The canonical UUID, "" for "-" (NVML had none), None when malformed."""
    if text == "-":
        return ""
    return uuid_name(text, prefix) if text.startswith(prefix) else None


# -- the child ------------------------------------------------------------------------------


def _child(library_fd: int, write_end: int, read_end: int, devnull: int, detail: bool) -> None:
    """Sandbox this forked process, ask NVML, write the answer, exit (never returns)."""
    code = 1
    try:
        os.setpgid(0, 0)
        os.close(read_end)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        _close_all_but((0, 1, 2, library_fd, write_end))
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        import errno

        from ocihook.linux import privileges, securepath

        try:
            privileges.drop_bounding_set()
        except OSError as error:  # no CAP_SETPCAP (`ocihook plan` as a user): none to drop
            if error.errno != errno.EPERM:
                raise
        privileges.clear_capabilities()  # every set empty; no_new_privs: none comes back
        lines = _ask(securepath.fd_path(library_fd), detail)
        code = 0
    except BaseException as error:  # noqa: BLE001 - whatever happened is the answer
        lines = [f"error {_describe(error)}"]
    try:
        os.write(write_end, ("\n".join(lines) + "\n").encode("ascii", "replace")[:MAX_ANSWER])
    except BaseException:  # noqa: BLE001
        code = 1
    os._exit(code)


def _close_all_but(keep: tuple[int, ...]) -> None:
    """Close every fd of this process but `keep` (listed from /proc/self/fd: the limit may
    be a million, and Python 3.9's closerange closes one by one)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 65536))
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own fd, already closed


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


class _Nvml:
    """The few NVML calls, each checked: a failure raises with NVML's own error string."""

    def __init__(self, path: str) -> None:
        import ctypes

        self.ctypes = ctypes
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as error:
            raise RuntimeError(f"cannot load the library: {error}") from None
        self.lib.nvmlErrorString.restype = ctypes.c_char_p

    def call(self, name: str, *args: object, allow: tuple[int, ...] = ()) -> int:
        try:
            function = getattr(self.lib, name)
        except AttributeError:
            raise RuntimeError(f"the library has no {name}") from None
        function.restype = self.ctypes.c_int
        result = function(*args)
        if result != NVML_SUCCESS and result not in allow:
            text = self.lib.nvmlErrorString(result) or b"unknown error"
            raise RuntimeError(f"{name} failed: {text.decode('ascii', 'replace')[:100]}")
        return result

    def uuid(self, handle: object) -> str:
        buffer = self.ctypes.create_string_buffer(UUID_BUFFER)
        self.call("nvmlDeviceGetUUID", handle, buffer, self.ctypes.c_uint(UUID_BUFFER))
        text = buffer.value.decode("ascii", "replace")
        return text if text.isprintable() and " " not in text and text else "-"


def _ask(path: str, detail: bool = False) -> list[str]:
    """NVML's GPUs and MIG devices as answer lines (in the child)."""
    nvml = _Nvml(path)
    c = nvml.ctypes
    nvml.call("nvmlInit_v2")
    lines = []
    try:
        count = c.c_uint()
        nvml.call("nvmlDeviceGetCount_v2", c.byref(count))
        for index in range(min(count.value, MAX_GPUS)):
            handle = c.c_void_p()
            nvml.call("nvmlDeviceGetHandleByIndex_v2", c.c_uint(index), c.byref(handle))
            minor = c.c_uint()
            nvml.call("nvmlDeviceGetMinorNumber", handle, c.byref(minor))
            current, pending = c.c_uint(), c.c_uint()
            mode = nvml.call(
                "nvmlDeviceGetMigMode",
                handle,
                c.byref(current),
                c.byref(pending),
                allow=(NVML_ERROR_NOT_SUPPORTED,),
            )
            enabled = mode == NVML_SUCCESS and current.value == NVML_DEVICE_MIG_ENABLE
            lines.append(f"gpu {index} {minor.value} {nvml.uuid(handle)} {int(enabled)}")
            facts = f"{_brand(nvml, handle)} {_compute_capability(nvml, handle)}"
            lines.append(f"facts {index} {facts}")
            if detail:
                capable = int(mode == NVML_SUCCESS)
                lines.append(
                    f"detail {index} {_memory(nvml, handle)} {capable} {_name(nvml, handle)}"
                )
            if enabled:
                lines += _mig_lines(nvml, index, handle, detail)
        lines.append(f"cuda {_cuda_version(nvml)}")
    finally:
        nvml.call("nvmlShutdown", allow=tuple(range(1, 1000)))
    lines.append("ok")
    return lines


def _brand(nvml: _Nvml, handle: object) -> str:
    """The GPU's nvmlBrandType_t number, "-" when NVML cannot tell."""
    c = nvml.ctypes
    brand = c.c_int()
    try:
        nvml.call("nvmlDeviceGetBrand", handle, c.byref(brand))
    except RuntimeError:
        return "-"
    return str(brand.value) if 0 <= brand.value <= MAX_BRAND else "-"


def _compute_capability(nvml: _Nvml, handle: object) -> str:
    """The GPU's compute capability "M.m", "-" when NVML cannot tell."""
    c = nvml.ctypes
    major, minor = c.c_int(), c.c_int()
    try:
        nvml.call("nvmlDeviceGetCudaComputeCapability", handle, c.byref(major), c.byref(minor))
    except RuntimeError:
        return "-"
    if 0 <= major.value < 100 and 0 <= minor.value < 100:
        return f"{major.value}.{minor.value}"
    return "-"


def _cuda_version(nvml: _Nvml) -> str:
    """The driver's CUDA version as NVML numbers it (12040: 12.4), "-" when it cannot tell;
    nvmlSystemGetCudaDriverVersion, the call libnvidia-container's requirement check makes."""
    c = nvml.ctypes
    version = c.c_int()
    try:
        nvml.call("nvmlSystemGetCudaDriverVersion", c.byref(version))
    except RuntimeError:
        return "-"
    return str(version.value) if 0 < version.value < MAX_CUDA else "-"


def _name(nvml: _Nvml, handle: object) -> str:
    """The GPU's product name ("NVIDIA H100 80GB HBM3"), "unknown" when NVML cannot tell."""
    c = nvml.ctypes
    buffer = c.create_string_buffer(NAME_BUFFER)
    try:
        nvml.call("nvmlDeviceGetName", handle, buffer, c.c_uint(NAME_BUFFER))
    except RuntimeError:
        return "unknown"
    text = buffer.value.decode("ascii", "replace").strip()
    return text if text and text.isprintable() else "unknown"


def _memory(nvml: _Nvml, handle: object) -> str:
    """The GPU's total memory in bytes (nvmlMemory_t's total), "-" when NVML cannot tell."""
    c = nvml.ctypes
    memory = (c.c_ulonglong * 3)()  # nvmlMemory_t: total, free, used
    try:
        nvml.call("nvmlDeviceGetMemoryInfo", handle, memory)
    except RuntimeError:
        return "-"
    return str(memory[0]) if 0 < memory[0] < MAX_MEMORY else "-"


def _profile_line(nvml: _Nvml, gpu: int, index: int, mig: object) -> list[str]:
    """A MIG device's slices and memory (nvmlDeviceAttributes_t), none when NVML cannot tell."""
    c = nvml.ctypes
    attributes = _Attributes(c)()
    try:
        nvml.call("nvmlDeviceGetAttributes_v2", mig, c.byref(attributes))
    except RuntimeError:
        return []
    gi, ci = attributes.gpuInstanceSliceCount, attributes.computeInstanceSliceCount
    return [f"profile {gpu} {index} {gi} {ci} {attributes.memorySizeMB}"]


def _Attributes(c):  # noqa: N802 - a ctypes structure made where ctypes is imported
    class Attributes(c.Structure):
        """nvmlDeviceAttributes_t"""

        _fields_ = [
            (name, c.c_uint)
            for name in (
                "multiprocessorCount",
                "sharedCopyEngineCount",
                "sharedDecoderCount",
                "sharedEncoderCount",
                "sharedJpegCount",
                "sharedOfaCount",
                "gpuInstanceSliceCount",
                "computeInstanceSliceCount",
            )
        ] + [("memorySizeMB", c.c_ulonglong)]

    return Attributes


def _mig_lines(nvml: _Nvml, gpu: int, handle: object, detail: bool = False) -> list[str]:
    c = nvml.ctypes
    most = c.c_uint()
    nvml.call("nvmlDeviceGetMaxMigDeviceCount", handle, c.byref(most))
    lines = []
    for index in range(min(most.value, MAX_MIG)):
        mig = c.c_void_p()
        found = nvml.call(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            handle,
            c.c_uint(index),
            c.byref(mig),
            allow=(NVML_ERROR_NOT_FOUND,),
        )
        if found != NVML_SUCCESS:
            continue  # no MIG device at this index
        gi, ci = c.c_uint(), c.c_uint()
        nvml.call("nvmlDeviceGetGpuInstanceId", mig, c.byref(gi))
        nvml.call("nvmlDeviceGetComputeInstanceId", mig, c.byref(ci))
        lines.append(f"mig {gpu} {index} {nvml.uuid(mig)} {gi.value} {ci.value}")
        if detail:
            lines += _profile_line(nvml, gpu, index, mig)
    return lines
