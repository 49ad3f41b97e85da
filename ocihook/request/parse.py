"""Which devices a container asks for: `all`, `none`/`void`, or a list of indices, ranges,
PCI addresses (`0000:c1:00.0`), node names (`renderD129`, `/dev/accel/accel3`) and the
names NVIDIA's schedulers hand out: GPU UUIDs (`GPU-8d2f...`), MIG device UUIDs
(`MIG-...`) and MIG index pairs (`0:1`: NVML's GPU index, then the MIG device's index
in NVML's order).

The request comes from an annotation (default `ocihook.io/devices`) and, only when the
config opts in, from the image env variable `<PREFIX>_VISIBLE_DEVICES`. The driver
capabilities (which parts of the driver: compute, utility, graphics, ...) come the same way
from `ocihook.io/capabilities` or `<PREFIX>_DRIVER_CAPABILITIES`.
"""

from __future__ import annotations

from ocihook.errors import OcihookError
from ocihook.request.state import CRIO_CONTAINER_ANNOTATIONS, TRUSTED_ANNOTATIONS
from ocihook.structs import Struct

MAX_REQUEST_LENGTH = 1024
MAX_INDEX = 4095


class DeviceRequest(Struct):
    """`indices` is None for `all`; empty `indices` and `names` mean nothing was asked for.
    `names` are PCI addresses, node names, GPU and MIG UUIDs and MIG index pairs (each in
    its canonical form: name_kind), resolved against the host's devices later."""

    __slots__ = (
        "indices", "origin", "names", "capabilities", "imex", "imex_origin", "switched"
    )  # fmt: skip
    _defaults = {
        "names": (),
        "capabilities": None,
        "imex": (),
        "imex_origin": "no request",
        "switched": (),
    }

    indices: tuple[int, ...] | None
    origin: str
    names: tuple[str, ...]
    capabilities: list[str] | None  # None: the profile's default capabilities
    imex: tuple[int, ...] | None  # NVIDIA IMEX channels (imex.py): None for all, () none
    imex_origin: str  # where the IMEX channels came from, for messages
    # capabilities only an image's switch asked for (NVIDIA_GDS=enabled: switched_capabilities):
    # given where the host has their nodes, left out where it has none (as NVIDIA's runtime)
    switched: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return self.indices == () and not self.names

    def describe(self) -> str:
        if self.indices is None:
            return "all"
        return ",".join([str(i) for i in self.indices] + list(self.names)) or "none"

    @property
    def needs_identity(self) -> bool:
        """Whether selecting needs the devices' PCI addresses or GPU UUIDs (read from the
        driver's files only then: requests by index or node name never pay for them)."""
        return bool(self.names) and any(name_kind(n) in ("pci", "gpu-uuid") for n in self.names)

    @property
    def needs_mig(self) -> bool:
        """Whether the request names a MIG device (resolved through NVML only then)."""
        return bool(self.names) and any(
            name_kind(n) in ("mig-uuid", "mig-index") for n in self.names
        )


def name_kind(name: str) -> str:
    """request.names.name_kind (imported when a request has names: not for indices alone)."""
    from ocihook.request.names import name_kind as kind

    return kind(name)


def parse_name(item: str) -> str | None:
    """request.names.parse_name (imported when a request has names: not for indices alone)."""
    from ocihook.request.names import parse_name as parse

    return parse(item)


def _index_or_range(text: str) -> tuple[int, int] | None:
    """(first, last) of "3" or "0-3" (1-4 ASCII digits each), else None."""
    first, dash, last = text.partition("-")
    last = last if dash else first
    for part in (first, last):
        if not (0 < len(part) <= 4 and part.isascii() and part.isdigit()):
            return None
    return int(first), int(last)


def parse_request(value: str, origin: str) -> DeviceRequest:
    """Parse `all`, `none`, `void`, `` (nothing) or a list such as `0,2,4-5`,
    `0000:c1:00.0,renderD129` into a request."""
    if len(value) > MAX_REQUEST_LENGTH:
        raise OcihookError(f"{origin}: device request longer than {MAX_REQUEST_LENGTH} characters")
    text = value.strip()
    keyword = text.lower()
    if keyword == "all":
        return DeviceRequest(None, origin)
    if keyword in ("", "none", "void"):
        return DeviceRequest((), origin)
    indices: set[int] = set()
    names: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        match = _index_or_range(item)
        if match:
            first, last = match
            if last < first or last > MAX_INDEX:
                raise OcihookError(f"{origin}: invalid device range {item!r}")
            indices.update(range(first, last + 1))
            continue
        name = parse_name(item)
        if name is None:
            raise OcihookError(
                f"{origin}: invalid device request {value!r:.60}: expected 'all', 'none' or "
                "a list of indices ('0,2', '0-3'), PCI addresses ('0000:c1:00.0'), "
                "node names ('renderD129'), GPU or MIG UUIDs ('GPU-...', 'MIG-...') "
                "and MIG devices ('0:1')"
            )
        if name not in names:
            names.append(name)
    return DeviceRequest(tuple(sorted(indices)), origin, tuple(names))


def requested_devices(
    annotations: dict[str, str],
    env: dict[str, str],
    annotation_key: str,
    env_key: str | None,
) -> DeviceRequest:
    """The container's request: the annotation wins over the env variable (when enabled)."""
    if annotation_key in annotations:
        return parse_request(annotations[annotation_key], f"annotation {annotation_key}")
    if env_key and env_key in env:
        return parse_request(env[env_key], f"image env {env_key}")
    return DeviceRequest((), "no request")


# CRI-O's record of the container's own CRI annotations (kubelet's and a device plugin's
# Allocate answer, never the pod's), as JSON, written over any pod annotation of that key
# (CRI-O 1.37: internal/factory/container/container.go, SpecAddAnnotations).
ALLOCATION_ORIGIN = "device plugin allocation"


def container_annotations(annotations: dict[str, str]) -> dict[str, str]:
    """Kubernetes mode: the container's own CRI annotations (kubelet's and the device
    plugin's Allocate answer, never the pod's), which CRI-O records as JSON under
    CRIO_CONTAINER_ANNOTATIONS; {} when there are none. OcihookError when the value is not
    the JSON object of strings CRI-O writes."""
    text = annotations.get(CRIO_CONTAINER_ANNOTATIONS)
    if text is None:
        return {}
    from ocihook.fastjson import loads

    try:
        document = loads(text) if len(text) <= 1 << 20 else None
    except ValueError:
        document = None
    if not isinstance(document, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in document.items()
    ):
        raise OcihookError(
            f"annotation {CRIO_CONTAINER_ANNOTATIONS}: not the JSON object of strings CRI-O writes"
        )
    return document


def allocated_devices(annotations: dict[str, str], annotation_key: str) -> DeviceRequest:
    """Kubernetes mode: the devices the device plugin allocated to this container, read only
    from the container's CRI annotations that CRI-O records under CRIO_CONTAINER_ANNOTATIONS
    (a pod's own `annotation_key`, annotation or env, is never read)."""
    document = container_annotations(annotations)
    if annotation_key not in document:
        return DeviceRequest((), "no allocation")
    return parse_request(document[annotation_key], f"{ALLOCATION_ORIGIN} ({annotation_key})")


def _index_of(name: str, available: dict) -> int | None:
    """The index of the device whose PCI address, GPU UUID, node name or node path is
    `name`."""
    for index, device in available.items():
        if (
            name == device.address
            or name == device.uuid
            or any(name == path or name == path.rsplit("/", 1)[-1] for path in device.nodes)
        ):
            return index
    return None


def _listing(available: dict, kind: str = "node") -> str:
    """ "0 (0000:c1:00.0 card1 renderD129), 1 (...)": what a request may name; for a GPU
    UUID the host's UUIDs ("0 GPU-..., 1 GPU-...")."""
    items = []
    for index in sorted(available):
        device = available[index]
        if kind == "gpu-uuid":
            items.append(f"{device.index} {device.uuid or '(UUID unknown)'}")
            continue
        words = [w for w in (device.address, device.uuid) if w] + [
            path.rsplit("/", 1)[-1] for path in device.nodes
        ]
        if device.index is None:  # NVIDIA's order not read: the nodes say which
            items.append(" ".join(words))
            continue
        items.append(f"{device.index} ({' '.join(words)})" if words else str(device.index))
    return ", ".join(items) or "none"


def _mig_listing(mig_devices: list) -> str:
    """ "0:0 MIG-..., 0:1 MIG-...": the host's MIG devices."""
    return ", ".join(f"{m.name} {m.uuid or '(UUID unknown)'}" for m in mig_devices) or "none"


def parse_capabilities(
    value: str, origin: str, available: list[str], by_name: list[str] | tuple = ()
) -> list[str] | None:
    """`compute,utility`, `all` or `` (the default: None) into capability names of the
    profile (`available`, in profile order); an unknown name is an error. `all` leaves out
    the capabilities in `by_name` (GPUDirect's: a container gets those only by name)."""
    if len(value) > MAX_REQUEST_LENGTH:
        raise OcihookError(f"{origin}: capability list longer than {MAX_REQUEST_LENGTH} characters")
    names = [n.strip() for n in value.lower().split(",") if n.strip()]
    if not names:
        return None
    if "all" in names:
        return [n for n in available if n not in by_name or n in names]
    unknown = [n for n in names if n not in available]
    if unknown:
        have = ", ".join(available) or "none"
        raise OcihookError(
            f"{origin}: unknown driver capability {unknown[0]!r:.40} (the profile has: {have})"
        )
    return [n for n in available if n in names]


def requested_capabilities(
    annotations: dict[str, str],
    env: dict[str, str],
    annotation_key: str,
    env_key: str | None,
    available: list[str],
    by_name: list[str] | tuple = (),
) -> list[str] | None:
    """The capabilities the container asks for (annotation first, then the env variable
    when enabled), or None for the profile's default."""
    if annotation_key in annotations:
        return parse_capabilities(
            annotations[annotation_key], f"annotation {annotation_key}", available, by_name
        )
    if env_key and env_key in env:
        return parse_capabilities(env[env_key], f"image env {env_key}", available, by_name)
    return None


def switched_capabilities(env: dict[str, str], switches: dict[str, str]) -> list[str]:
    """The capabilities whose switch variable (`switches`: variable -> capability, from the
    profile's `switch` keys) the image's env sets to `enabled` (NVIDIA_GDS=enabled), in the
    profile's order; exactly that word, as NVIDIA's runtime reads it."""
    return [name for variable, name in switches.items() if env.get(variable) == "enabled"]


class Selection(Struct):
    """The devices a request selects: whole devices by index, and MIG devices."""

    __slots__ = ("indices", "mig")
    indices: list[int]
    mig: list  # plan.model.MigDevice, in request order


def select_devices(
    request: DeviceRequest, available: dict, mig_devices: list | None = None
) -> Selection:
    """The devices to inject (`available`: index -> devices.Device; `mig_devices`: the
    host's plan.model.MigDevice, None when the request names none); an index, address, UUID,
    node name or MIG device the host does not have is an error listing what it has."""
    if request.indices is None:
        return Selection(sorted(available), [])
    missing = [i for i in request.indices if i not in available]
    if missing:
        have = ",".join(str(i) for i in sorted(available)) or "none"
        raise OcihookError(
            f"{request.origin}: device index {','.join(map(str, missing))} does not exist "
            f"(available: {have})"
        )
    selected = set(request.indices)
    mig: list = []
    for name in request.names:
        kind = name_kind(name)
        if kind in ("mig-uuid", "mig-index"):
            found = [m for m in mig_devices or () if name in (m.name, m.uuid)]
            if not found:
                raise OcihookError(
                    f"{request.origin}: MIG device {name!r:.80} does not exist "
                    f"(MIG devices: {_mig_listing(mig_devices or [])[:800]})"
                )
            if found[0] not in mig:
                mig.append(found[0])
            continue
        index = _index_of(name, available)
        if index is None:
            raise OcihookError(
                f"{request.origin}: device {name!r:.80} does not exist "
                f"(available: {_listing(available, kind)[:800]})"
            )
        selected.add(index)
    return Selection(sorted(selected), mig)


def select_indices(request: DeviceRequest, available: dict) -> list[int]:
    """The whole devices a request without MIG devices selects (select_devices)."""
    return select_devices(request, available).indices


def _covers(devices: object, request: DeviceRequest) -> bool:
    """Whether an entry's `devices` covers the request as written: `all`, or a list naming
    every index and every name of it (names compared in canonical form: an entry's
    GPU-/MIG- UUID covers a request by that UUID in any case, not one by the index that
    happens to be that device: the allow-list is checked before devices are read)."""
    if devices == "all":
        return True
    if request.indices is None or not isinstance(devices, list):
        return False  # `all` is allowed only by an entry with devices: all
    indices = {d for d in devices if isinstance(d, int) and not isinstance(d, bool)}
    names = set()
    for item in devices:
        if isinstance(item, str):
            name = parse_name(item)
            if name is None:
                raise OcihookError(f"config: request.allow: invalid device name {item!r:.60}")
            names.add(name)
    return set(request.indices) <= indices and set(request.names) <= names


def _annotations_match(patterns: dict[str, str], annotations: dict[str, str]) -> bool:
    """Every key regex matches some annotation whose value matches the value regex
    (unanchored search, like containers/common's hooks `when.annotations`)."""
    import re  # only when an allow-list is configured: not on every container start

    for key_re, value_re in patterns.items():
        try:
            key_pattern, value_pattern = re.compile(key_re), re.compile(value_re)
        except re.error as error:
            raise OcihookError(
                f"config: request.allow: invalid regex {key_re!r:.60}: {error}"
            ) from None
        if not any(
            key_pattern.search(key) and value_pattern.search(value)
            for key, value in annotations.items()
        ):
            return False
    return True


def _covers_imex(allowed: object, request: DeviceRequest) -> bool:
    """An entry's `imex_channels` (absent: none) covers the request's IMEX channels."""
    if request.imex == ():
        return True
    from ocihook.request.imex import covers

    return covers(allowed, request.imex)


def check_allowed(
    request: DeviceRequest,
    annotations: dict[str, str],
    allow: list[dict],
    trusted: list[str] = TRUSTED_ANNOTATIONS,
) -> None:
    """Pass if some allow-list entry matches the container's annotations and covers the
    requested devices; else raise OcihookError naming what was refused. Only the annotations
    named in `trusted` (the config's request.trusted_annotations) are read: every other key
    may come from whoever wrote the pod."""
    readable = {key: annotations[key] for key in trusted if key in annotations}
    for entry in allow:
        if (
            _annotations_match(entry.get("annotations") or {}, readable)
            and _covers(entry.get("devices"), request)
            and _covers_imex(entry.get("imex_channels"), request)
        ):
            return
    if request.imex != ():
        from ocihook.request.imex import describe

        raise OcihookError(
            f"{request.origin}: request for devices '{request.describe():.60}' with IMEX "
            f"channels '{describe(request.imex):.60}' ({request.imex_origin}) is not allowed by "
            "the config's request.allow list for this container's annotations"
        )
    raise OcihookError(
        f"{request.origin}: request for devices '{request.describe():.60}' is not allowed by the "
        "config's request.allow list for this container's annotations"
    )
