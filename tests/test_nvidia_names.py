"""NVIDIA's device names in requests and the allow-list (GPU-/MIG- UUIDs, MIG index pairs),
how they select against the host's devices, and how the NVML child's answer is validated
(plain data: no root, no GPU)."""

from __future__ import annotations

import pytest

from ocihook.discover import nvml
from ocihook.discover.devices import Device
from ocihook.errors import OcihookError
from ocihook.plan.model import MigDevice
from ocihook.request.parse import check_allowed, parse_request, select_devices

GPU0 = "GPU-3b6d0a1c-5e2f-4a7b-9c8d-0e1f2a3b4c5d"
GPU1 = "GPU-86f0e1d2-c3b4-4a59-8876-5f4e3d2c1b0a"
MIG0 = "MIG-5a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d"
MIG1 = "MIG-3c9d8e7f-6a5b-5c4d-9e3f-2a1b0c9d8e7f"
AVAILABLE = {
    0: Device(0, "0000:3b:00.0", "nvidia", ["/dev/nvidia0"], GPU0),
    1: Device(1, "0000:86:00.0", "nvidia", ["/dev/nvidia1"], GPU1),
}
MIGS = [
    MigDevice("0:0", MIG0, 0, 5, 0, ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21"], []),
    MigDevice("0:1", MIG1, 0, 3, 0, ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12"], []),
]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (GPU0, (GPU0,)),
        (GPU0.upper().replace("GPU-", "GPU-"), (GPU0,)),  # hex in any case
        ("gpu-" + GPU0[4:], (GPU0,)),
        (MIG1, (MIG1,)),
        ("0:1", ("0:1",)),
        ("00:01", ("0:1",)),
        (f"{GPU1},0:0", (GPU1, "0:0")),
        ("0000:3b:00.0", ("0000:3b:00.0",)),  # a PCI address is no MIG pair
    ],
)
def test_nvidia_names_parse_to_canonical_form(text, names):
    assert parse_request(text, "t").names == names


@pytest.mark.parametrize(
    "text",
    [
        "GPU-3b6d0a1c-5e2f-4a7b-9c8d-0e1f2a3b4c5",  # one digit short
        "GPU-3b6d0a1c5e2f-4a7b-9c8d-0e1f2a3b4c5d0",  # groups wrong
        "GPU-3b6d0a1c-5e2f-4a7b-9c8d-0e1f2a3b4c5g",  # not hex
        "MIG-GPU-3b6d0a1c-5e2f-4a7b-9c8d-0e1f2a3b4c5d/1/0",  # pre-R470 form: not supported
        "0:",
        ":1",
        "0:1:2",
        "0:12345",
        "0:\u0661",
    ],
)
def test_malformed_nvidia_names_are_refused_before_any_lookup(text):
    with pytest.raises(OcihookError, match="invalid device request"):
        parse_request(text, "t")


def test_needs_identity_and_mig_only_for_the_names_that_need_them():
    """Requests by index or node name never read the driver's files nor NVML."""
    assert not parse_request("0,nvidia1", "t").needs_identity
    assert not parse_request("0,nvidia1", "t").needs_mig
    assert parse_request(GPU0, "t").needs_identity
    assert parse_request("0000:3b:00.0", "t").needs_identity
    assert not parse_request(GPU0, "t").needs_mig
    assert parse_request("0:1", "t").needs_mig and parse_request(MIG0, "t").needs_mig


def test_uuids_and_mig_names_select():
    selection = select_devices(parse_request(f"{GPU1},{MIG1},0:0", "t"), AVAILABLE, MIGS)
    assert selection.indices == [1]
    assert [m.name for m in selection.mig] == ["0:1", "0:0"]
    same = select_devices(parse_request(f"{MIG0},0:0", "t"), AVAILABLE, MIGS)
    assert [m.name for m in same.mig] == ["0:0"]  # one device, two names: once


def test_a_uuid_the_host_lacks_lists_the_ones_it_has():
    missing = "GPU-00000000-0000-0000-0000-000000000000"
    with pytest.raises(OcihookError) as error:
        select_devices(parse_request(missing, "annotation x"), AVAILABLE)
    assert str(error.value) == (
        f"annotation x: device '{missing}' does not exist (available: 0 {GPU0}, 1 {GPU1})"
    )
    with pytest.raises(OcihookError) as error:
        select_devices(parse_request("0:5", "annotation x"), AVAILABLE, MIGS)
    assert str(error.value) == (
        f"annotation x: MIG device '0:5' does not exist (MIG devices: 0:0 {MIG0}, 0:1 {MIG1})"
    )


def test_allow_list_names_cover_requests_that_name_them():
    """An entry's names cover a request by those names (canonical: any case); not a request
    by another name of the same device (the allow-list is checked before devices are read:
    fail closed)."""
    entry = [{"devices": [1, GPU0.upper().replace("GPU-", "GPU-"), "0:1", MIG0]}]
    for text in (GPU0, "1", f"1,{GPU0}", "0:1", MIG0, f"{MIG0},0:1"):
        check_allowed(parse_request(text, "t"), {}, entry)
    for text in ("0", GPU1, "0:0", MIG1, "all", "nvidia0"):
        with pytest.raises(OcihookError, match="not allowed"):
            check_allowed(parse_request(text, "t"), {}, entry)
    with pytest.raises(OcihookError, match="invalid device name"):
        check_allowed(parse_request("0", "t"), {}, [{"devices": ["GPU-zz"]}])


def test_allow_list_device_names_are_checked_when_the_config_compiles(tmp_path):
    import yaml

    from ocihook.config.compiled import compile_config
    from tests.support import synthetic

    path = tmp_path / "config.yaml"
    base = synthetic.config(tmp_path, profile="nvidia")
    bad = {**base, "request": {"allow": [{"devices": [0, "GPU-1234"]}]}}
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(OcihookError) as error:
        compile_config(str(path))
    assert "request.allow.0.devices: 'GPU-1234' is no device name" in str(error.value)
    good = {**base, "request": {"allow": [{"devices": [0, GPU0, "0:1"]}]}}
    path.write_text(yaml.safe_dump(good))
    assert compile_config(str(path))[0]["request"]["allow"][0]["devices"] == [0, GPU0, "0:1"]


# -- the NVML child's answer ------------------------------------------------------------


def test_answer_is_parsed():
    text = (
        f"gpu 0 0 {GPU0} 1\nfacts 0 14 9.0\nmig 0 0 {MIG0} 5 0\nmig 0 1 - 3 0\n"
        f"gpu 1 1 {GPU1} 0\nfacts 1 - -\ncuda 12040\nok\n"
    ).encode()
    answer = nvml.parse_answer(text, "lib")
    gpus = answer.gpus
    assert [(g.index, g.minor, g.uuid, g.mig_enabled) for g in gpus] == [
        (0, 0, GPU0, True),
        (1, 1, GPU1, False),
    ]
    assert [(m.index, m.uuid, m.gi, m.ci) for m in gpus[0].mig] == [
        (0, MIG0, 5, 0),
        (1, None, 3, 0),
    ]
    # what NVIDIA's requirement check reads: brand 14 is NVML_BRAND_NVIDIA; "-": unknown
    assert [(g.brand, g.arch) for g in gpus] == [("nvidia", "9.0"), (None, None)]
    assert answer.cuda == "12.4"
    assert (
        nvml.parse_answer(f"gpu 0 0 {GPU0} 0\nfacts 0 99 10.0\nok\n".encode(), "l").gpus[0].brand
        == "unknown"
    )  # a brand NVML adds later
    assert nvml.parse_answer(f"gpu 0 0 {GPU0} 0\ncuda -\nok\n".encode(), "l").cuda is None


@pytest.mark.parametrize(
    "text",
    [
        b"gpu 0 0 GPU-x 0\nok\n",  # a malformed UUID
        f"gpu 0 0 {MIG0} 0\nok\n".encode(),  # a MIG UUID for a GPU
        f"gpu 0 300 {GPU0} 0\nok\n".encode(),  # a minor out of range
        f"gpu 0 0 {GPU0} 2\nok\n".encode(),
        f"gpu 0 0 {GPU0} 0\ngpu 0 1 {GPU1} 0\nok\n".encode(),  # one index twice
        f"mig 0 0 {MIG0} 5 0\nok\n".encode(),  # a MIG device of no GPU
        f"gpu 0 0 {GPU0} 1\nmig 0 0 {MIG0} -5 0\nok\n".encode(),
        f"gpu 0 0 {GPU0} 0\nok\nok\n".encode(),  # anything after the end
        f"gpu 0 0 {GPU0} 0\n".encode(),  # no end: the child died
        b"\xff\nok\n",
        b"hello\nok\n",
        b"gpu 0 0 - 0\n" * 7000 + b"ok\n",  # too long
        f"gpu 0 0 {GPU0} 0\nfacts 1 2 9.0\nok\n".encode(),  # facts of no GPU
        f"gpu 0 0 {GPU0} 0\nfacts 0 tesla 9.0\nok\n".encode(),  # a brand is a number
        f"gpu 0 0 {GPU0} 0\nfacts 0 2 9\nok\n".encode(),  # an arch is M.m
        f"gpu 0 0 {GPU0} 0\nfacts 0 2 100.0\nok\n".encode(),
        f"gpu 0 0 {GPU0} 0\nfacts 0 2\nok\n".encode(),
        f"gpu 0 0 {GPU0} 0\ncuda 12.4\nok\n".encode(),  # NVML's number, not a version
        f"gpu 0 0 {GPU0} 0\ncuda 99999999\nok\n".encode(),
    ],
)
def test_malformed_answers_are_one_line(text):
    with pytest.raises(OcihookError) as error:
        nvml.parse_answer(text, "lib")
    assert str(error.value).startswith("NVML lib: ") and "\n" not in str(error.value)


def test_error_answer_keeps_nvmls_words_printable_only():
    with pytest.raises(OcihookError) as error:
        nvml.parse_answer(b"error nvmlInit_v2 failed: Driver Not Loaded\x1b[31m\n", "lib")
    assert str(error.value) == "NVML lib: nvmlInit_v2 failed: Driver Not Loaded[31m"
