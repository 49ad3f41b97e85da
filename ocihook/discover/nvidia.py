"""NVIDIA's names for its devices (a profile's `devices.nvidia`), read from the driver's
files under the device root, by fd, and from NVML only where those files cannot tell.

- GPUs: `/proc/driver/nvidia/gpus/<PCI address>/information` has `GPU UUID:` and
  `Device Minor:` (the N of /dev/nvidiaN). A GPU's index is its position in PCI bus
  order of these files (number_gpus): NVML's, nvidia-smi's, CUDA's and NVIDIA's toolkit's
  numbering, which the minors need not follow (a GPU re-plugged, a driver reloaded); a
  GPU the driver excludes (`GPU Excluded: Yes`, NVreg_ExcludedGpus) has none, as NVML
  lists it not. Where the driver lists no GPU there, NVML's index is asked (only when a
  request needs the order). The driver prints a UUID only when it can read it (else no
  line, or `GPU-????????-...` before the GPU is initialized): then, and only when a
  request names a UUID that no file shows, NVML is asked (nvml.py).
- MIG devices: NVML names them (`MIG-<uuid>`, and `GPU:index` pairs: NVML's GPU index and
  the MIG device's index in NVML's order) and gives their GPU instance (GI) and compute
  instance (CI) ids. The driver's capability files give each instance's node:
  `/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/access` and `.../ci<C>/access`
  hold `DeviceFileMinor:` (and `DeviceFileMode:`) of `/dev/nvidia-caps/nvidia-cap<minor>`,
  a char device of the `nvidia-caps` major in /proc/devices. A container given a MIG
  device gets its GPU's node, its GI's and CI's cap nodes and the control nodes; never the
  management capabilities `mig/config` and `mig/monitor` (which let the holder reconfigure
  or watch every MIG device): a cap node with one of their minors is refused.

NVML runs only when a request names a MIG device (or a UUID the files lack), when an
image's NVIDIA_REQUIRE_* reaches a brand or arch constraint (GpuFacts), or for the
read-only commands on a host that has MIG instances: never on the path of other requests.
"""

from __future__ import annotations

import os
import stat

from ocihook.discover.procdevices import char_majors
from ocihook.discover.roots import Roots, host_path, in_root, read_small_file, resolve_final
from ocihook.errors import OcihookError
from ocihook.linux import securepath
from ocihook.plan.model import DeviceNode, MigDevice
from ocihook.request.names import GPU_PREFIX, pci_address, uuid_name
from ocihook.structs import Struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# The keys of a profile's `devices.nvidia` (schema: ocihook/schema.json), with defaults.
DEFAULTS = {
    "gpus": "/proc/driver/nvidia/gpus",
    "capabilities": "/proc/driver/nvidia/capabilities",
    "caps_node": "/dev/nvidia-caps/nvidia-cap{minor}",
    "caps_major": "nvidia-caps",
    "nvml": "libnvidia-ml.so.1",
    "nvml_timeout": 10,
}
MANAGEMENT = ("config", "monitor")  # mig/<name>: capabilities no container gets
MAX_FILE = 4096


class GpuFile(Struct):
    """What a GPU's information file says: its PCI address, minor and UUID (None: the
    driver shows none)."""

    __slots__ = ("address", "minor", "uuid", "excluded")
    address: str
    minor: int
    uuid: str | None
    excluded: bool  # `GPU Excluded: Yes`: NVML (and so CUDA, nvidia-smi) does not list it


def settings(spec: dict) -> dict | None:
    """The profile's `devices.nvidia` with its defaults, or None when it has none."""
    own = spec.get("nvidia")
    return None if own is None else {**DEFAULTS, **own}


def _read(roots: Roots, path: str) -> str | None:
    return read_small_file(roots, path, MAX_FILE)


def info_fields(text: str) -> dict[str, str]:
    """ "Key: value" lines of an information file (the driver pads values with tabs and
    spaces)."""
    fields = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _small_number(text: str | None, bound: int) -> int | None:
    if text and len(text) <= 6 and text.isascii() and text.isdigit() and int(text) < bound:
        return int(text)
    return None


def read_gpus(roots: Roots, nvidia: dict) -> dict[int, GpuFile]:
    """minor -> what each GPU's information file says (none when the driver lists none)."""
    directory = nvidia["gpus"]
    found: dict[int, GpuFile] = {}
    for name in sorted(roots.listing(roots.device_fd, directory).entries):
        if pci_address(name) != name:
            continue
        text = _read(roots, f"{directory}/{name}/information")
        if text is None:
            continue
        fields = info_fields(text)
        minor = _small_number(fields.get("Device Minor"), 256)
        if minor is None:
            where = host_path(roots.device_root, f"{directory}/{name}/information")
            raise OcihookError(f"{where}: no valid 'Device Minor:' line")
        uuid = uuid_name(fields.get("GPU UUID", ""), GPU_PREFIX)
        excluded = fields.get("GPU Excluded", "").lower() == "yes"
        found[minor] = GpuFile(name, minor, uuid, excluded)
    return found


def number_gpus(roots: Roots, nvidia: dict, found: dict, names: Names | None) -> dict:
    """index -> devices.Device in NVIDIA's numbering, from `found` (node number -> Device):
    index N is the N-th GPU in PCI bus order of the information files (its address, UUID
    and driver set from there); a node no file names is no GPU of the driver, a GPU without
    a node keeps its index (nothing to inject: a request for it fails). Without files:
    NVML's index (`names`: asked in its child). Neither tells (no kernel module loaded: no
    GPU would work anyway): the node numbers."""
    files = read_gpus(roots, nvidia)
    numbered: dict = {}
    if files:
        listed = sorted((g for g in files.values() if not g.excluded), key=lambda g: g.address)
        for index, info in enumerate(listed):
            device = found.get(info.minor)
            if device is not None:
                device.index, device.address, device.driver = index, info.address, "nvidia"
                device.uuid = info.uuid
                numbered[index] = device
        return numbered
    if names is None:
        return found
    try:
        gpus = names.nvml()
    except OcihookError:
        return found
    for gpu in gpus:
        device = found.get(gpu.minor)
        if device is not None:
            device.index, device.driver = gpu.index, "nvidia"
            device.uuid = device.uuid or gpu.uuid
            numbered[gpu.index] = device
    return numbered


def caps_major(roots: Roots, nvidia: dict) -> int:
    """The char major of the driver's capability nodes (its name in /proc/devices)."""
    majors = char_majors(roots).get(nvidia["caps_major"])
    if majors:
        return min(majors)
    raise OcihookError(
        f"{host_path(roots.device_root, '/proc/devices')}: no char major "
        f"'{nvidia['caps_major']}': MIG devices need the driver's capability nodes "
        "(the nvidia module loaded with MIG support)"
    )


def _cap_file(roots: Roots, path: str) -> tuple[int, int | None] | None:
    """(DeviceFileMinor, DeviceFileMode) of a capability file, None when it is missing."""
    text = _read(roots, path)
    if text is None:
        return None
    fields = info_fields(text)
    minor = _small_number(fields.get("DeviceFileMinor"), 1 << 20)
    if minor is None:
        raise OcihookError(
            f"{host_path(roots.device_root, path)}: no valid 'DeviceFileMinor:' line"
        )
    mode = _small_number(fields.get("DeviceFileMode"), 0o10000)
    return minor, mode


def management_minors(roots: Roots, nvidia: dict) -> dict[int, str]:
    """minor -> name of the management capabilities (mig/config, mig/monitor)."""
    minors = {}
    for name in MANAGEMENT:
        found = _cap_file(roots, f"{nvidia['capabilities']}/mig/{name}")
        if found is not None:
            minors[found[0]] = f"mig/{name}"
    return minors


def host_has_mig(roots: Roots, nvidia: dict, minors: list[int]) -> bool:
    """Whether the capability files show a GPU instance on one of the GPUs `minors`."""
    for minor in minors:
        entries = roots.listing(roots.device_fd, f"{nvidia['capabilities']}/gpu{minor}/mig")
        if any(name.startswith("gi") for name in entries.entries):
            return True
    return False


def cap_node(
    roots: Roots, nvidia: dict, major: int, cap: str, index: int, access: str
) -> DeviceNode:
    """The node of the capability file `cap` (in-root): its minor from the file; the host
    node, when it exists, must be that char device (its mode is kept), else the node is
    made with the file's DeviceFileMode."""
    found = _cap_file(roots, cap)
    if found is None:
        raise OcihookError(f"{host_path(roots.device_root, cap)}: missing")
    minor, mode = found
    path = nvidia["caps_node"].replace("{minor}", str(minor))
    final = resolve_final(roots.device_fd, path)
    if final is None:
        if mode is None:
            raise OcihookError(
                f"device {host_path(roots.device_root, path)} not found, and "
                f"{host_path(roots.device_root, cap)} gives no DeviceFileMode to make it with"
            )
        where = host_path(roots.device_root, path)
        gid = 0
    else:
        st = final[1]
        if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) != (
            major,
            minor,
        ):
            raise OcihookError(
                f"device {host_path(roots.device_root, path)}: not the char device "
                f"{major}:{minor} that {host_path(roots.device_root, cap)} names"
            )
        mode = stat.S_IMODE(st.st_mode)
        gid = st.st_gid
        where = host_path(roots.device_root, in_root(roots.device_real, final[0]))
    return DeviceNode(path, where, "c", major, minor, mode, index, access, gid=gid)


class Names:
    """NVIDIA's names on one host, asked of NVML at most once and only when needed.
    `nvml_dirs(soname)` gives the source root's dirs to look for the library in (the ld
    cache's, then the profile's: discovery's own lookup), `version` the running driver's."""

    def __init__(
        self,
        roots: Roots,
        spec: dict,
        nvml_dirs: Callable[[str], list[str]] | None,
        version: str | None,
        detail: bool = False,
    ) -> None:
        self.roots = roots
        self.detail = detail  # NVML's detail too (discover/facts.py; never the hook)
        self.spec = spec
        self.nvidia = settings(spec) or dict(DEFAULTS)
        self.nvml_dirs = nvml_dirs
        self.version = version
        self._answer = None  # nvml.Answer, once asked
        self._error: OcihookError | None = None

    def nvml(self) -> list:
        """nvml.GpuInfo of every GPU (asked once; a failure is raised again, not retried)."""
        return self.answer().gpus

    def answer(self):
        """NVML's whole answer (nvml.Answer: the GPUs and the driver's CUDA version), asked
        once; a failure is raised again, not retried."""
        if self._error is not None:
            raise self._error
        if self._answer is None:
            from ocihook.discover import nvml

            try:
                fd, where = self._open_library()
                try:
                    self._answer = nvml.query(
                        fd, float(self.nvidia["nvml_timeout"]), where, self.detail
                    )
                finally:
                    os.close(fd)
            except OcihookError as error:
                self._error = error
                raise
        return self._answer

    def _open_library(self) -> tuple[int, str]:
        """The NVML library of the running driver in the source root, opened by fd."""
        roots, name = self.roots, self.nvidia["nvml"]
        for directory in self.nvml_dirs(name) if self.nvml_dirs else ():
            final = resolve_final(roots.source_fd, f"{directory}/{name}")
            if final is None or not stat.S_ISREG(final[1].st_mode):
                continue
            inner = in_root(roots.source_real, final[0])
            if self.version and not inner.endswith(f".so.{self.version}"):
                continue  # an older driver's library
            try:
                fd = securepath.resolve(roots.source_fd, inner, flags=os.O_RDONLY)
            except OSError as error:
                where = host_path(roots.source_root, inner)
                raise OcihookError(f"NVML {where}: {error.strerror}") from None
            return fd, host_path(roots.source_root, inner)
        version = f" of driver {self.version}" if self.version else ""
        raise OcihookError(
            f"NVML ({name}{version}) not found in the source root {roots.source_root}'s "
            "library dirs"
        )

    def fill_uuids(self, available: dict) -> None:
        """Set the UUID of every device whose information file showed none, from NVML."""
        by_minor = {gpu.minor: gpu for gpu in self.nvml()}
        for device in available.values():
            gpu = by_minor.get(device.number)
            if device.uuid is None and gpu is not None and gpu.uuid:
                device.uuid = gpu.uuid

    def mig_devices(self, available: dict) -> list[MigDevice]:
        """Every MIG device of the host, in NVML's order, with its nodes."""
        gpus = [gpu for gpu in self.nvml() if gpu.mig]
        if not gpus:
            return []
        roots, nvidia = self.roots, self.nvidia
        major = caps_major(roots, nvidia)
        management = management_minors(roots, nvidia)
        access = self.spec["access"]
        found = []
        by_minor = {device.number: device for device in available.values()}
        for gpu in gpus:
            parent = by_minor.get(gpu.minor)
            for mig in gpu.mig:
                # G: the GPU's index, the plain index's numbering (NVML's: PCI bus order)
                name = f"{gpu.index if parent is None else parent.index}:{mig.index}"
                if parent is None:
                    raise OcihookError(
                        f"MIG device {name}: NVML puts it on the GPU of minor {gpu.minor}, "
                        f"which the device root {roots.device_root} has no node of"
                    )
                base = f"{nvidia['capabilities']}/gpu{gpu.minor}/mig/gi{mig.gi}"
                caps = [
                    cap_node(roots, nvidia, major, f"{base}/access", parent.index, access),
                    cap_node(
                        roots, nvidia, major, f"{base}/ci{mig.ci}/access", parent.index, access
                    ),
                ]
                for node in caps:
                    if node.minor in management:
                        raise OcihookError(
                            f"MIG device {name}: its capability node {node.host_path} has the "
                            f"minor of {management[node.minor]}, which no container may get"
                        )
                nodes = list(parent.nodes) + [node.path for node in caps]
                found.append(MigDevice(name, mig.uuid, parent.index, mig.gi, mig.ci, nodes, caps))
        return found


class GpuFacts:
    """What NVIDIA's requirement check (plan/require.py) reads of NVML, asked when called:
    minor -> (brand, compute capability) of every GPU, and the driver's CUDA version.
    NVML that cannot answer (missing, failing, hung past its time limit) answers nothing,
    and `error` says why: the check then takes those facts as unknown, as NVIDIA's does."""

    def __init__(self, roots: Roots, profile: dict, version: str | None) -> None:
        self.roots = roots
        self.profile = profile
        self.version = version
        self.error: str | None = None

    def __call__(self) -> tuple[dict, str | None]:
        from ocihook.discover.libfinder import LibraryFinder

        finder = LibraryFinder(self.roots, self.profile)
        names = Names(
            self.roots, self.profile["devices"], lambda n: finder.dirs(n, 64), self.version
        )
        try:
            answer = names.answer()
        except OcihookError as error:
            self.error = str(error)
            return {}, None
        return {gpu.minor: (gpu.brand, gpu.arch) for gpu in answer.gpus}, answer.cuda
