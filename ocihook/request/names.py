"""Device names as requests spell them (the one home of their syntax, for the request
parser and the allow-list's check in the config): PCI addresses, node names, GPU and MIG
UUIDs as NVIDIA writes them, and MIG index pairs. Each parser returns the canonical form,
or None for text that is not such a name."""

from __future__ import annotations

MAX_NAME_LENGTH = 255
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
HEX = frozenset("0123456789abcdef")


UUID_GROUPS = (8, 4, 4, 4, 12)
GPU_PREFIX, MIG_PREFIX = "GPU-", "MIG-"


def name_kind(name: str) -> str:
    """What a canonical request name is: pci, gpu-uuid, mig-uuid, mig-index or node."""
    if name.startswith(GPU_PREFIX):
        return "gpu-uuid"
    if name.startswith(MIG_PREFIX):
        return "mig-uuid"
    if ":" in name:
        return "pci" if "." in name else "mig-index"
    return "node"


def uuid_name(text: str, prefix: str) -> str | None:
    """ "GPU-8d2f0a3c-..." (the hex in any case) as NVIDIA writes it, lower-case hex after
    `prefix` (GPU- or MIG-), else None."""
    if not text[:4].upper() == prefix or len(text) != 4 + 36:
        return None
    groups = text[4:].lower().split("-")
    if [len(g) for g in groups] != list(UUID_GROUPS) or not all(HEX.issuperset(g) for g in groups):
        return None
    return prefix + "-".join(groups)


def mig_index(text: str) -> str | None:
    """ "0:1" (NVML's GPU index, the MIG device's index on it; 1-4 ASCII digits each) in
    canonical form, else None."""
    gpu, colon, mig = text.partition(":")
    for part in (gpu, mig):
        if not (colon and 0 < len(part) <= 4 and part.isascii() and part.isdigit()):
            return None
    return f"{int(gpu)}:{int(mig)}"


def parse_name(item: str) -> str | None:
    """One request item that is not an index or range, in canonical form, else None."""
    head = item[:4].upper()
    if head in (GPU_PREFIX, MIG_PREFIX):
        return uuid_name(item, head)
    if ":" in item:
        return pci_address(item) if "." in item else mig_index(item)
    return node_name(item)


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


def node_name(text: str) -> str | None:
    """ "renderD129" or "/dev/dri/renderD129": a node name (not all digits) or a /dev path."""
    if not 0 < len(text) <= MAX_NAME_LENGTH:
        return None
    parts = text[5:].split("/") if text.startswith("/dev/") else [text]
    if all(p and p not in (".", "..") and NAME_CHARS.issuperset(p) for p in parts) and not (
        text.isdigit()
    ):
        return text
    return None
