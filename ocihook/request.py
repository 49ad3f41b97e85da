"""Which devices a container asks for: `all`, `none`/`void`, or a list of indices.

The request comes from an annotation (default `ocihook.io/devices`) and, only when the
config opts in, from the image env variable `<PREFIX>_VISIBLE_DEVICES`. The driver
capabilities (which parts of the driver: compute, utility, graphics, ...) come the same way
from `ocihook.io/capabilities` or `<PREFIX>_DRIVER_CAPABILITIES`.
"""

from __future__ import annotations

from ocihook.errors import OcihookError
from ocihook.struct import Struct

MAX_REQUEST_LENGTH = 1024
MAX_INDEX = 4095


class DeviceRequest(Struct):
    """`indices` is None for `all`; an empty tuple means nothing was asked for."""

    __slots__ = ("indices", "origin", "capabilities")
    _defaults = {"capabilities": None}

    indices: tuple[int, ...] | None
    origin: str
    capabilities: list[str] | None  # None: the profile's default capabilities

    @property
    def empty(self) -> bool:
        return self.indices == ()

    def describe(self) -> str:
        if self.indices is None:
            return "all"
        return ",".join(str(i) for i in self.indices) or "none"


def _index_or_range(text: str) -> tuple[int, int] | None:
    """(first, last) of "3" or "0-3" (1-4 ASCII digits each), else None."""
    first, dash, last = text.partition("-")
    last = last if dash else first
    for part in (first, last):
        if not (0 < len(part) <= 4 and part.isascii() and part.isdigit()):
            return None
    return int(first), int(last)


def parse_request(value: str, origin: str) -> DeviceRequest:
    """Parse `all`, `none`, `void`, `` (nothing) or `0,2,4-5` into a request."""
    if len(value) > MAX_REQUEST_LENGTH:
        raise OcihookError(f"{origin}: device request longer than {MAX_REQUEST_LENGTH} characters")
    text = value.strip().lower()
    if text == "all":
        return DeviceRequest(None, origin)
    if text in ("", "none", "void"):
        return DeviceRequest((), origin)
    indices: set[int] = set()
    for item in text.split(","):
        match = _index_or_range(item.strip())
        if not match:
            raise OcihookError(
                f"{origin}: invalid device request {value!r:.60}: "
                "expected 'all', 'none' or indices like '0,2' or '0-3'"
            )
        first, last = match
        if last < first or last > MAX_INDEX:
            raise OcihookError(f"{origin}: invalid device range {item.strip()!r}")
        indices.update(range(first, last + 1))
    return DeviceRequest(tuple(sorted(indices)), origin)


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


def select_indices(request: DeviceRequest, available: list[int]) -> list[int]:
    """The indices to inject; an index the host does not have is an error."""
    if request.indices is None:
        return sorted(available)
    missing = [i for i in request.indices if i not in available]
    if missing:
        have = ",".join(str(i) for i in sorted(available)) or "none"
        raise OcihookError(
            f"{request.origin}: device index {','.join(map(str, missing))} does not exist "
            f"(available: {have})"
        )
    return list(request.indices)


def _covers(devices: object, request: DeviceRequest) -> bool:
    if devices == "all":
        return True
    if request.indices is None or not isinstance(devices, list):
        return False  # `all` is allowed only by an entry with devices: all
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


def check_allowed(request: DeviceRequest, annotations: dict[str, str], allow: list[dict]) -> None:
    """Pass if some allow-list entry matches the container's annotations and covers the
    requested devices; else raise OcihookError naming what was refused."""
    for entry in allow:
        if _annotations_match(entry.get("annotations") or {}, annotations) and _covers(
            entry.get("devices"), request
        ):
            return
    raise OcihookError(
        f"{request.origin}: request for devices '{request.describe():.60}' is not allowed by the "
        "config's request.allow list for this container's annotations"
    )
