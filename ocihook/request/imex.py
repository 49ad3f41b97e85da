"""NVIDIA IMEX channels: `/dev/nvidia-caps-imex-channels/channelN`, the char device of the
`nvidia-caps-imex-channels` major (/proc/devices) and minor N, which lets a container's
CUDA share memory with the other nodes of a multi-node NVLink domain (the IMEX daemon
grants access by channel).

Asked for with a device request, by the annotation `ocihook.io/imex-channels` (the
config's request.imex_annotation) or, with request.env, the image env variable
`NVIDIA_IMEX_CHANNELS` (NVIDIA's name): `all` or a list of channel numbers and ranges
(`0`, `0,2`, `0-3`). The host's nodes are the only source: a channel without a node (the
driver makes none unless told to, and nvidia-imex-ctl or udev creates them) is an error,
never a node made up for the container. Every node is checked to be the char device of
that major and minor N (discover/imex.py, which reads the host).
"""

from __future__ import annotations

from ocihook.errors import OcihookError

# The keys of a profile's `devices.nvidia` that IMEX channels use, with defaults.
DEFAULTS = {
    "imex_node": "/dev/nvidia-caps-imex-channels/channel{minor}",
    "imex_major": "nvidia-caps-imex-channels",
    "imex_cdi_kind": "nvidia.com/imex-channel",  # `cdi generate`'s kind for them (NVIDIA's)
}
MAX_REQUEST_LENGTH = 1024
MAX_CHANNEL = (1 << 20) - 1  # a minor number
ENV_SUFFIX = "_IMEX_CHANNELS"


def settings(spec: dict) -> dict | None:
    """The IMEX keys of the profile's `devices.nvidia` with defaults; None without one."""
    own = spec.get("nvidia")
    return None if own is None else {**DEFAULTS, **own}


def number(text: str) -> int | None:
    if 0 < len(text) <= 7 and text.isascii() and text.isdigit() and int(text) <= MAX_CHANNEL:
        return int(text)
    return None


def parse_channels(value: str, origin: str) -> tuple[int, ...] | None:
    """`all` (None), `none`/`void`/`` (no channel: ()) or a list such as `0,2,4-5`."""
    if len(value) > MAX_REQUEST_LENGTH:
        raise OcihookError(
            f"{origin}: IMEX channel list longer than {MAX_REQUEST_LENGTH} characters"
        )
    text = value.strip()
    if text.lower() == "all":
        return None
    if text.lower() in ("", "none", "void"):
        return ()
    channels: set[int] = set()
    for raw in text.split(","):
        item = raw.strip()
        first, dash, last = item.partition("-")
        low, high = number(first), number(last if dash else first)
        if low is None or high is None or high < low or high - low > 4095:
            raise OcihookError(
                f"{origin}: invalid IMEX channel list {value!r:.60}: expected 'all', 'none' or "
                "channel numbers and ranges ('0', '0,2', '0-3')"
            )
        channels.update(range(low, high + 1))
    return tuple(sorted(channels))


def describe(channels: tuple[int, ...] | None) -> str:
    return "all" if channels is None else ",".join(map(str, channels)) or "none"


def requested_channels(
    annotations: dict[str, str], env: dict[str, str], annotation_key: str, env_key: str | None
) -> tuple[tuple[int, ...] | None, str]:
    """(channels, origin): the annotation wins over the env variable (when enabled)."""
    if annotation_key in annotations:
        origin = f"annotation {annotation_key}"
        return parse_channels(annotations[annotation_key], origin), origin
    if env_key and env_key in env:
        origin = f"image env {env_key}"
        return parse_channels(env[env_key], origin), origin
    return (), "no request"


def covers(allowed: object, channels: tuple[int, ...] | None) -> bool:
    """Whether an allow-list entry's `imex_channels` (absent: none) covers the request as
    written: `all` only by `all`."""
    if channels == ():
        return True
    if allowed == "all":
        return True
    if channels is None or not isinstance(allowed, list):
        return False
    return set(channels) <= {c for c in allowed if isinstance(c, int)}
