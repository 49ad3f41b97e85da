"""Which devices a container asks for: `all`, `none`/`void`, or a list of indices, ranges,
PCI addresses (`0000:c1:00.0`) and node names (`renderD129`, `/dev/accel/accel3`).

The request comes from an annotation (default `ocihook.io/devices`) and, only when the
config opts in, from the image env variable `<PREFIX>_VISIBLE_DEVICES`. The driver
capabilities (which parts of the driver: compute, utility, graphics, ...) come the same way
from `ocihook.io/capabilities` or `<PREFIX>_DRIVER_CAPABILITIES`.
"""

from __future__ import annotations

from ocihook.config import TRUSTED_ANNOTATIONS
from ocihook.errors import OcihookError
from ocihook.slots import Struct

MAX_REQUEST_LENGTH = 1024
MAX_INDEX = 4095


MAX_NAME_LENGTH = 255
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
HEX = frozenset("0123456789abcdef")


class DeviceRequest(Struct):
    """`indices` is None for `all`; empty `indices` and `names` mean nothing was asked for.
    `names` are PCI addresses and node names, resolved against the host's devices later."""

    __slots__ = ("indices", "origin", "names", "capabilities")
    _defaults = {"names": (), "capabilities": None}

    indices: tuple[int, ...] | None
    origin: str
    names: tuple[str, ...]
    capabilities: list[str] | None  # None: the profile's default capabilities

    @property
    def empty(self) -> bool:
        return self.indices == () and not self.names

    def describe(self) -> str:
        if self.indices is None:
            return "all"
        return ",".join([str(i) for i in self.indices] + list(self.names)) or "none"


def _index_or_range(text: str) -> tuple[int, int] | None:
    """(first, last) of "3" or "0-3" (1-4 ASCII digits each), else None."""
    first, dash, last = text.partition("-")
    last = last if dash else first
    for part in (first, last):
        if not (0 < len(part) <= 4 and part.isascii() and part.isdigit()):
            return None
    return int(first), int(last)


def pci_address(text: str) -> str | None:
    """ "0000:c1:00.0" (or "c1:00.0", any case) in the kernel's form, else None."""
    text = text.lower()
    if len(text) == 7:
        text = "0000:" + text
    if (
        len(text) == 12
        and text[4] == ":"
        and text[7] == ":"
        and text[10] == "."
        and HEX.issuperset(text[:4] + text[5:7] + text[8:10])
        and text[11] in "01234567"
    ):
        return text
    return None


def _node_name(text: str) -> str | None:
    """ "renderD129" or "/dev/dri/renderD129": a node name (not all digits) or a /dev path."""
    if not 0 < len(text) <= MAX_NAME_LENGTH:
        return None
    parts = text[5:].split("/") if text.startswith("/dev/") else [text]
    if all(p and p not in (".", "..") and NAME_CHARS.issuperset(p) for p in parts) and not (
        text.isdigit()
    ):
        return text
    return None


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
        name = pci_address(item) if ":" in item else _node_name(item)
        if name is None:
            raise OcihookError(
                f"{origin}: invalid device request {value!r:.60}: expected 'all', 'none' or "
                "a list of indices ('0,2', '0-3'), PCI addresses ('0000:c1:00.0') "
                "and node names ('renderD129')"
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


def _index_of(name: str, available: dict) -> int | None:
    """The index of the device whose PCI address, node name or node path is `name`."""
    for index, device in available.items():
        if name == device.address or any(
            name == path or name == path.rsplit("/", 1)[-1] for path in device.nodes
        ):
            return index
    return None


def _listing(available: dict) -> str:
    """ "0 (0000:c1:00.0 card1 renderD129), 1 (...)": what a request may name."""
    items = []
    for index in sorted(available):
        device = available[index]
        words = ([device.address] if device.address else []) + [
            path.rsplit("/", 1)[-1] for path in device.nodes
        ]
        items.append(f"{index} ({' '.join(words)})" if words else str(index))
    return ", ".join(items) or "none"


def parse_capabilities(value: str, origin: str, available: list[str]) -> list[str] | None:
    """`compute,utility`, `all` or `` (the default: None) into capability names of the
    profile (`available`, in profile order); an unknown name is an error."""
    if len(value) > MAX_REQUEST_LENGTH:
        raise OcihookError(f"{origin}: capability list longer than {MAX_REQUEST_LENGTH} characters")
    names = [n.strip() for n in value.lower().split(",") if n.strip()]
    if not names:
        return None
    if "all" in names:
        return list(available)
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
) -> list[str] | None:
    """The capabilities the container asks for (annotation first, then the env variable
    when enabled), or None for the profile's default."""
    if annotation_key in annotations:
        return parse_capabilities(
            annotations[annotation_key], f"annotation {annotation_key}", available
        )
    if env_key and env_key in env:
        return parse_capabilities(env[env_key], f"image env {env_key}", available)
    return None


def select_indices(request: DeviceRequest, available: dict) -> list[int]:
    """The indices to inject (`available`: index -> devices.Device); an index, address or
    node name the host does not have is an error."""
    if request.indices is None:
        return sorted(available)
    missing = [i for i in request.indices if i not in available]
    if missing:
        have = ",".join(str(i) for i in sorted(available)) or "none"
        raise OcihookError(
            f"{request.origin}: device index {','.join(map(str, missing))} does not exist "
            f"(available: {have})"
        )
    selected = set(request.indices)
    for name in request.names:
        index = _index_of(name, available)
        if index is None:
            raise OcihookError(
                f"{request.origin}: device {name!r:.80} does not exist "
                f"(available: {_listing(available)[:400]})"
            )
        selected.add(index)
    return sorted(selected)


def _covers(devices: object, request: DeviceRequest) -> bool:
    if devices == "all":
        return True
    if request.indices is None or not isinstance(devices, list):
        return False  # `all` is allowed only by an entry with devices: all
    if request.names:
        return False  # addresses and node names: only an entry with devices: all covers them
    return set(request.indices) <= set(devices)


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
        if _annotations_match(entry.get("annotations") or {}, readable) and _covers(
            entry.get("devices"), request
        ):
            return
    raise OcihookError(
        f"{request.origin}: request for devices '{request.describe():.60}' is not allowed by the "
        "config's request.allow list for this container's annotations"
    )
