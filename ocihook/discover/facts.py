"""What the driver tells of each device beyond its nodes: product, memory, compute capability
or compute units, family, firmware, and for NVIDIA the driver's CUDA version, MIG capability
and the MIG devices' profiles. `ocihook features` makes node labels of them and the
exporter puts them on its per-device metrics; the hook never reads them.

Where each fact comes from, all read-only and under the device root (by fd, in-root):

- NVIDIA: NVML asked with detail (nvml.py: the sandboxed child, killed after the profile's
  `nvml_timeout`, as for the hook): the GPU's name, memory, compute capability, whether it
  supports MIG, each MIG device's size as NVIDIA names it (`1g.10gb`), the driver's CUDA
  version; the driver's information file `/proc/driver/nvidia/gpus/<address>/information`:
  `Video BIOS:` (firmware) and `Model:` (the name where NVML cannot answer).
- sysfs, any PCI device (AMD's amdgpu, Intel's i915 and xe, ...): its PCI function
  (`/sys/bus/pci/devices/<address>`, else behind its class entry `/sys/class/<class>/<node>/
  device`, else `/sys/dev/char/M:m/device`): `vendor` and `device` ids; amdgpu's
  `mem_info_vram_total`, `vbios_version` and `product_name`; KFD's topology node of that
  function (`/sys/class/kfd/kfd/topology/nodes/N/properties`: `simd_count / simd_per_cu`
  compute units, `gfx_target_version` the family as ROCm names it, gfx942); i915's
  `lmem_total_bytes` (on the card), xe's `tile<N>/physical_vram_size_bytes` (memory, and
  the number of tiles).

A fact the driver does not tell is None: no guess. NVML that cannot answer (missing, failing,
hung past its limit) leaves the NVIDIA facts it would have given None and says why in
`Facts.problem`.
"""

from __future__ import annotations

from ocihook.discover.roots import Roots, read_small_file
from ocihook.errors import OcihookError
from ocihook.structs import Struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ocihook.plan.model import Plan

VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel", "0x1da3": "habana"}
MAX_ATTRIBUTE = 4096
MAX_BYTES = 1 << 50  # memory sizes above a PiB are not believed
KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"


class DeviceFacts(Struct):
    """One device (by its index) and what its driver tells; None: not told."""

    __slots__ = (
        "index",
        "address",
        "vendor",
        "device_id",
        "product",
        "family",
        "memory",
        "compute_capability",
        "compute_units",
        "tiles",
        "firmware",
        "mig_capable",
        "mig_profiles",
    )
    _defaults = {
        "vendor": None,
        "device_id": None,
        "product": None,
        "family": None,
        "memory": None,
        "compute_capability": None,
        "compute_units": None,
        "tiles": None,
        "firmware": None,
        "mig_capable": None,
        "mig_profiles": {},
    }
    index: int | None
    address: str | None  # the PCI address
    vendor: str | None  # nvidia, amd, intel, habana, or the PCI vendor id
    device_id: str | None  # the PCI device id, "0x2330"
    product: str | None  # "NVIDIA H100 80GB HBM3"
    family: str | None  # AMD: the gfx target (gfx942)
    memory: int | None  # bytes
    compute_capability: str | None  # NVIDIA: "9.0"
    compute_units: int | None  # AMD: CUs
    tiles: int | None  # Intel xe: tiles
    firmware: str | None  # NVIDIA's and AMD's VBIOS version
    mig_capable: bool | None  # NVIDIA
    mig_profiles: dict  # NVIDIA: MIG profile ("1g.10gb") -> how many MIG devices have it


class Facts(Struct):
    """Every device's facts in index order, the driver's CUDA version (NVIDIA) and why a
    part could not be read (None: everything asked was answered)."""

    __slots__ = ("devices", "cuda_driver", "problem")
    devices: list[DeviceFacts]
    cuda_driver: str | None
    problem: str | None

    def to_dict(self) -> dict:
        return {
            "devices": [device.to_dict() for device in self.devices],
            "cuda_driver": self.cuda_driver,
            "problem": self.problem,
        }


def gather(config: dict, roots: Roots, plan: Plan) -> Facts:
    """The facts of the plan's devices (a plan for `all`), read under `roots`, in index
    order (NVIDIA's numbering, read from the driver's information files here when the
    plan did not need it)."""
    spec = config["profile"]["devices"]
    by_path = {node.path: node for node in plan.devices}
    pairs = [(device, DeviceFacts(device.index, device.address)) for device in plan.device_list]
    nvidia = spec.get("nvidia") is not None
    if nvidia:
        _nvidia_files(roots, spec, pairs)
    for device, facts in pairs:
        base = _sysfs_dir(roots, spec, device, facts.address, by_path)
        if base is not None:
            _read_sysfs(roots, base, facts, device)
    cuda, problem = None, None
    if nvidia and pairs:
        cuda, problem = _nvidia(config, roots, plan, pairs)
    devices = [facts for _, facts in pairs]
    devices.sort(key=lambda f: (f.index is None, f.index or 0))
    return Facts(devices, cuda, problem)


def _attribute(roots: Roots, path: str) -> str | None:
    """A sysfs attribute's text, stripped; None when it is missing or unreadable."""
    try:
        text = read_small_file(roots, path, MAX_ATTRIBUTE)
    except OcihookError:
        return None
    if text is None:
        return None
    text = text.strip()
    return text if text and text.replace("\n", " ").replace("\t", " ").isprintable() else None


def _number(text: str | None, bound: int = MAX_BYTES) -> int | None:
    if text is None:
        return None
    try:
        value = int(text, 0)
    except ValueError:
        return None
    return value if 0 <= value < bound else None


def _sysfs_dir(roots: Roots, spec: dict, device, address: str | None, by_path: dict) -> str | None:
    """The in-root sysfs dir of the device's PCI function (the first of the places the
    module's docstring lists that has a `vendor` file), or None."""
    candidates = []
    if address:
        candidates.append(f"/sys/bus/pci/devices/{address}")
    classes = (spec.get("sysfs") or {}).get("classes") or []
    for path in device.nodes:
        name = path.rsplit("/", 1)[-1]
        candidates += [f"/sys/class/{cls}/{name}/device" for cls in classes]
        node = by_path.get(path)
        if node is not None:
            candidates.append(f"/sys/dev/char/{node.major}:{node.minor}/device")
    for candidate in candidates:
        if _attribute(roots, f"{candidate}/vendor") is not None:
            return candidate
    return None


def _read_sysfs(roots: Roots, base: str, facts: DeviceFacts, device) -> None:
    vendor = _attribute(roots, f"{base}/vendor")
    facts.vendor = VENDORS.get((vendor or "").lower(), vendor) or facts.vendor
    facts.device_id = _attribute(roots, f"{base}/device")
    # amdgpu
    facts.memory = _number(_attribute(roots, f"{base}/mem_info_vram_total"))
    facts.firmware = _attribute(roots, f"{base}/vbios_version") or facts.firmware
    facts.product = _attribute(roots, f"{base}/product_name") or facts.product
    if facts.address:
        _read_kfd(roots, facts)
    # Intel: i915's local memory on the card, xe's per tile
    for path in device.nodes:
        name = path.rsplit("/", 1)[-1]
        if name.startswith("card") and facts.memory is None:
            facts.memory = _number(_attribute(roots, f"/sys/class/drm/{name}/lmem_total_bytes"))
    tiles = sorted(
        name
        for name in roots.listing(roots.device_fd, base).entries
        if name.startswith("tile") and name[4:].isdigit()
    )
    if tiles:
        facts.tiles = len(tiles)
        sizes = [
            _number(_attribute(roots, f"{base}/{tile}/physical_vram_size_bytes")) for tile in tiles
        ]
        if facts.memory is None and all(size is not None for size in sizes):
            facts.memory = sum(sizes)  # type: ignore[arg-type]


def _read_kfd(roots: Roots, facts: DeviceFacts) -> None:
    """Compute units and the gfx target from the KFD topology node of the device's PCI
    function (`domain` and `location_id` = bus << 8 | device << 3 | function)."""
    address = facts.address or ""
    try:
        domain = int(address[:4], 16)
        bus, slot, function = int(address[5:7], 16), int(address[8:10], 16), int(address[11], 16)
    except (ValueError, IndexError):
        return
    location = bus << 8 | slot << 3 | function
    for name in sorted(roots.listing(roots.device_fd, KFD_NODES).entries):
        text = _attribute(roots, f"{KFD_NODES}/{name}/properties")
        if text is None:
            continue
        properties = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            properties[key] = _number(value.strip(), 1 << 40)
        if properties.get("location_id") != location or properties.get("domain", 0) != domain:
            continue
        simds, per_cu = properties.get("simd_count"), properties.get("simd_per_cu")
        if simds and per_cu:
            facts.compute_units = simds // per_cu
        target = properties.get("gfx_target_version")
        if target:
            major, minor, step = target // 10000, target // 100 % 100, target % 100
            facts.family = f"gfx{major}{minor:x}{step:x}"
        return


def _nvidia_files(roots: Roots, spec: dict, pairs: list) -> None:
    """Each GPU's index (NVIDIA's: PCI bus order of the information files), address, VBIOS
    and model from the driver's information files, by the minor of its node."""
    from ocihook.discover import nvidia

    settings = nvidia.settings(spec)
    try:
        files = nvidia.read_gpus(roots, settings)
    except OcihookError:
        return
    listed = sorted((g for g in files.values() if not g.excluded), key=lambda g: g.address)
    index_of = {g.minor: i for i, g in enumerate(listed)}
    for device, facts in pairs:
        facts.vendor = "nvidia"
        info = files.get(device.number)
        if info is None:
            continue
        facts.address = info.address
        facts.index = index_of.get(device.number, facts.index)
        text = _attribute(roots, f"{settings['gpus']}/{info.address}/information")
        fields = nvidia.info_fields(text or "")
        facts.firmware = fields.get("Video BIOS") or None
        facts.product = fields.get("Model") or None


def _nvidia(config: dict, roots: Roots, plan: Plan, pairs: list):
    """NVML's detail for NVIDIA's GPUs, by the minor of their node; (CUDA version, problem)."""
    from ocihook.discover import nvidia
    from ocihook.discover.libfinder import LibraryFinder

    profile = config["profile"]
    finder = LibraryFinder(roots, profile, False)
    names = nvidia.Names(
        roots, profile["devices"], lambda n: finder.dirs(n, 64), plan.driver_version, detail=True
    )
    try:
        answer = names.answer()
    except OcihookError as error:
        return None, str(error)
    by_minor = {gpu.minor: gpu for gpu in answer.gpus}
    for device, facts in pairs:
        gpu = by_minor.get(device.number)
        if gpu is None:
            continue
        if gpu.name and gpu.name != "unknown":
            facts.product = gpu.name
        facts.memory = gpu.memory
        facts.compute_capability = gpu.arch
        facts.mig_capable = gpu.mig_capable
        profiles: dict[str, int] = {}
        for mig in gpu.mig:
            if mig.profile:
                profiles[mig.profile] = profiles.get(mig.profile, 0) + 1
        facts.mig_profiles = profiles
    return answer.cuda, None
