"""Requests by PCI address and node name: what parses, what is refused before any lookup,
and how names resolve against the host's devices (plain data, no root needed)."""

from __future__ import annotations

import pytest

from ocihook.discover.devices import Device
from ocihook.errors import OcihookError
from ocihook.request.parse import DeviceRequest, check_allowed, parse_request, select_indices

AVAILABLE = {
    0: Device(0, "0000:41:00.0", "amdgpu", ["/dev/dri/card2", "/dev/dri/renderD129"]),
    1: Device(1, "0000:c1:00.0", "amdgpu", ["/dev/dri/card1", "/dev/dri/renderD128"]),
}


@pytest.mark.parametrize(
    ("text", "indices", "names"),
    [
        ("0000:c1:00.0", (), ("0000:c1:00.0",)),
        ("0000:C1:00.0", (), ("0000:c1:00.0",)),
        ("c1:00.0", (), ("0000:c1:00.0",)),
        ("renderD129", (), ("renderD129",)),
        ("/dev/dri/renderD129", (), ("/dev/dri/renderD129",)),
        (" 1 , renderD129 ,1", (1,), ("renderD129",)),
        ("renderD129,renderD129", (), ("renderD129",)),
        ("0-1,accel_controlD3", (0, 1), ("accel_controlD3",)),
        ("ALL", None, ()),
        ("None", (), ()),
    ],
)
def test_parse(text, indices, names):
    request = parse_request(text, "t")
    assert (request.indices, request.names) == (indices, names)


@pytest.mark.parametrize(
    "text",
    [
        "0000:c1:00.8",  # function 0-7
        "0000:g1:00.0",
        "0000:c1:00:0",
        "00000:c1:00.0",
        "c1:0.0",
        "render D129",
        "renderD129;id",
        "../kfd",
        "/dev/../kfd",
        "/dev/dri//card1",
        "/dev/",
        "/etc/passwd",
        "card1\x00",
        "card\u0661",  # an Arabic-Indic digit
        "x" * 256,
        "renderD129,",
    ],
)
def test_refused_before_any_lookup(text):
    with pytest.raises(OcihookError, match="invalid device request"):
        parse_request(text, "t")


@pytest.mark.parametrize(
    ("text", "selected"),
    [
        ("renderD128", [1]),
        ("card2", [0]),
        ("/dev/dri/card1", [1]),
        ("0000:41:00.0,1", [0, 1]),
        ("all", [0, 1]),
    ],
)
def test_names_resolve_to_indices(text, selected):
    assert select_indices(parse_request(text, "t"), AVAILABLE) == selected


def test_a_name_is_the_whole_node_name():
    """`card1` is not a prefix match of `card10`, nor `dri/card1` a name."""
    with pytest.raises(OcihookError, match="device 'card' does not exist"):
        select_indices(parse_request("card", "t"), AVAILABLE)
    with pytest.raises(OcihookError, match="invalid device request"):
        select_indices(parse_request("dri/card1", "t"), AVAILABLE)


def test_describe_keeps_names():
    assert parse_request("1,renderD129", "t").describe() == "1,renderD129"


def test_allow_list_covers_names_only_with_all():
    """The allow-list is checked before devices are enumerated: names cannot be mapped to
    indices yet, so only `devices: all` covers them (fail closed)."""
    request = parse_request("renderD129", "t")
    check_allowed(request, {}, [{"devices": "all"}])
    with pytest.raises(OcihookError, match="not allowed"):
        check_allowed(request, {}, [{"devices": [0, 1]}])
    check_allowed(DeviceRequest((0,), "t"), {}, [{"devices": [0, 1]}])
