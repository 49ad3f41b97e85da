"""plan/require.py: NVIDIA_REQUIRE_* decided as NVIDIA decides it (libnvidia-container's
`nvidia-container-cli --require`: src/cli/dsl.c and configure.c; which variables, as the
toolkit reads an image's env: internal/config/image).

The golden (tests/golden/require-forms.json) holds every NVIDIA_REQUIRE_* form of NVIDIA's
own test data (the toolkit's requirement, constraint, image and hook-config tests, its
runtime README, the legacy CUDA_VERSION cases) and the stock nvidia/cuda:12.6.3 image's
requirement, each decided on four hosts: "ok" or the one line the container is refused with
(a malformed one included: never a traceback).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ocihook.errors import OcihookError
from ocihook.plan import require
from ocihook.plan.require import Gpu, Host
from tests.support.golden import golden_json

GOLDEN = Path(__file__).parent / "golden"

# nvidia/cuda:12.6.3's NVIDIA_REQUIRE_CUDA (its Dockerfile's ENV, gitlab.com/nvidia/
# container-images/cuda dist/12.6.3): CUDA 12.6, or a datacenter or workstation brand on
# the 470, 535 or 550 branch, which its cuda-compat-12-6 package serves.
CUDA_IMAGE_BRANDS = (
    "unknown grid tesla nvidia quadro quadrortx nvidiartx vapps vpc vcs vws cloudgaming"
).split()
CUDA_12_6_3 = "cuda>=12.6 " + " ".join(
    f"brand={brand},driver>={branch},driver<{branch + 1}"
    for branch in (470, 535, 550)
    for brand in CUDA_IMAGE_BRANDS
)


def _host(driver, cuda, brand=None, arch=None, gpus=1):
    """A host whose GPUs (minors 0..gpus-1) all have `brand` and `arch`, NVML asked lazily
    (`host.asked` shows whether it was)."""
    facts = {minor: (brand, arch) for minor in range(gpus)}
    selected = [Gpu(f"GPU {minor}", minor) for minor in range(gpus)]
    return Host(driver, cuda, selected, lambda: (facts, None))


HOSTS = {
    # a stand-in R550 datacenter host (an H200: NVML's brand NVIDIA, compute capability 9.0)
    "r550-h200": lambda: _host("550.54.14", "12.4", "nvidia", "9.0"),
    "r535-geforce-ampere": lambda: _host("535.104.05", "12.2", "geforce", "8.6"),
    "r580-tesla-volta": lambda: _host("580.65.06", "13.0", "tesla", "7.0"),
    "no-gpu-selected": lambda: Host("550.54.14", "12.4", [], None),
}


def _decide(env: dict, host: Host) -> str:
    try:
        require.check(require.requirements(env), host)
    except OcihookError as error:
        return f"refused: {error}"
    return "ok"


# (case, env): NVIDIA's test data's forms, each in the variable NVIDIA's tests put it.
FORMS = [
    ("empty", {"NVIDIA_REQUIRE_CUDA": ""}),
    ("missing operator", {"NVIDIA_REQUIRE_CUDA": "notvalid"}),
    ("unsupported property", {"NVIDIA_REQUIRE_CUDA": "foo=45"}),
    ("cuda not a version", {"NVIDIA_REQUIRE_CUDA": "cuda=foo"}),
    ("cuda >=", {"NVIDIA_REQUIRE_CUDA": "cuda>=11.6"}),
    ("cuda >", {"NVIDIA_REQUIRE_CUDA": "cuda>11.6"}),
    ("cuda <=", {"NVIDIA_REQUIRE_CUDA": "cuda<=11.6"}),
    ("cuda <", {"NVIDIA_REQUIRE_CUDA": "cuda<11.6"}),
    ("cuda =", {"NVIDIA_REQUIRE_CUDA": "cuda=11.6"}),
    ("cuda !=", {"NVIDIA_REQUIRE_CUDA": "cuda!=11.6"}),
    ("a term of an unsupported property", {"NVIDIA_REQUIRE_CUDA": "cuda>=11.6 foo=bar"}),
    ("spaces or", {"NVIDIA_REQUIRE_CUDA": "cuda>=11.6 arch=5.3"}),
    ("commas and", {"NVIDIA_REQUIRE_CUDA": "cuda>=11.6,arch=5.3"}),
    ("and binds tighter", {"NVIDIA_REQUIRE_CUDA": "cuda<13.6 cuda>=11.6,arch=5.3"}),
    ("a brand", {"NVIDIA_REQUIRE_CUDA": "cuda>=11.6", "NVIDIA_REQUIRE_BRAND": "brand=tesla"}),
    ("README cuda 7.5", {"NVIDIA_REQUIRE_CUDA": "cuda>=7.5"}),
    ("README cuda 8.0", {"NVIDIA_REQUIRE_CUDA": "cuda>=8.0"}),
    ("README cuda 9.0", {"NVIDIA_REQUIRE_CUDA": "cuda>=9.0"}),
    (
        "hook config requirements",
        {"NVIDIA_REQUIRE_CUDA": "cuda>=9.0", "NVIDIA_REQUIRE_REQ0": "req0=true"},
    ),
    ("jetpack ignored", {"NVIDIA_REQUIRE_JETPACK": "csv-mounts=all"}),
    ("jetpack host mounts ignored", {"NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS": "base-only"}),
    ("legacy image", {"CUDA_VERSION": "11.6"}),
    ("legacy image 9.0", {"CUDA_VERSION": "9.0"}),
    ("legacy image, a brand", {"CUDA_VERSION": "11.6", "NVIDIA_REQUIRE_BRAND": "brand=tesla"}),
    (
        "legacy image, NVIDIA_REQUIRE_CUDA wins",
        {"CUDA_VERSION": "9.0", "NVIDIA_REQUIRE_CUDA": "cuda>=9.0"},
    ),
    (
        "disabled",
        {
            "NVIDIA_REQUIRE_CUDA": "cuda>=11.6",
            "NVIDIA_REQUIRE_BRAND": "brand=tesla",
            "NVIDIA_DISABLE_REQUIRE": "true",
        },
    ),
    (
        "disabled, legacy",
        {
            "CUDA_VERSION": "11.6",
            "NVIDIA_REQUIRE_BRAND": "brand=tesla",
            "NVIDIA_DISABLE_REQUIRE": "true",
        },
    ),
    ("nvidia/cuda:12.6.3", {"NVIDIA_REQUIRE_CUDA": CUDA_12_6_3, "CUDA_VERSION": "12.6.3"}),
]
FORMS += [
    (f"legacy CUDA_VERSION {value}", {"CUDA_VERSION": value})
    for value in ("0", "8", "7.5", "9.0.116", "4294967295.4294967295.4294967295", "v11.6")
]
FORMS += [
    (f"legacy CUDA_VERSION {value} (not one)", {"CUDA_VERSION": value})
    for value in (
        "foo",
        "foo.5.10",
        "9.0.116.50",
        "9.0.116foo",
        "7.foo",
        "9.0.bar",
        "9.4294967296",
        "9.0.116.",
        "9..0",
        "9.",
        ".5.10",
        "-9",
        "+9",
        "-9.1.116",
        "-9.-1.-116",
    )
]


def test_every_form_of_nvidias_test_data():
    """Each form decided on each host: "ok" or the one-line refusal; NVML (brand, arch) is
    asked only where evaluation reaches a brand or arch constraint (`nvml` lists those)."""
    decided = {}
    for case, env in FORMS:
        row = {"env": env}
        asked = []
        for name, make in HOSTS.items():
            host = make()
            row[name] = _decide(env, host)
            assert "\n" not in row[name] and "Traceback" not in row[name]
            if host.asked is not None:
                asked.append(name)
        row["nvml"] = asked
        decided[case] = row
    assert len(decided) == len(FORMS)
    assert decided == golden_json(GOLDEN / "require-forms.json", decided)


def test_which_variables_are_requirements():
    env = {
        "NVIDIA_REQUIRE_CUDA": "cuda>=12.2",
        "NVIDIA_REQUIRE_DRIVER": "driver>=530",
        "NVIDIA_REQUIRE_JETPACK": "jetpack>=99",  # NVIDIA's check leaves it out too
        "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS": "x",
        "PATH": "/bin",
    }
    assert require.requirements(env) == [
        ("NVIDIA_REQUIRE_CUDA", "cuda>=12.2"),
        ("NVIDIA_REQUIRE_DRIVER", "driver>=530"),
    ]
    for true in ("1", "t", "T", "TRUE", "true", "True"):
        assert require.requirements({**env, "NVIDIA_DISABLE_REQUIRE": true}) == []
    for other in ("0", "false", "yes", ""):
        assert len(require.requirements({**env, "NVIDIA_DISABLE_REQUIRE": other})) == 2
    assert require.requirements({"CUDA_VERSION": "11.8.0"}) == [("CUDA_VERSION", "cuda>=11.8")]


def test_requirements_are_bounded():
    with pytest.raises(OcihookError, match="longer than 4096 characters"):
        require.requirements({"NVIDIA_REQUIRE_CUDA": "cuda>=1 " * 1000})
    many = {f"NVIDIA_REQUIRE_X{i}": "cuda>=1" for i in range(require.MAX_REQUIREMENTS + 1)}
    with pytest.raises(OcihookError, match="more than 32"):
        require.requirements(many)


# -- the evaluation order and the facts ------------------------------------------------------


def _fact(**facts):
    return lambda name: facts.get(name)


@pytest.mark.parametrize(
    "expression, facts, failed",
    [
        ("cuda>=12.2", {"cuda": "12.2"}, None),
        ("cuda>=12.4", {"cuda": "12.2"}, "cuda>=12.4"),
        ("CUDA>=12.2", {"cuda": "12.2"}, None),  # property names in any case
        ("cuda<=12.2.0", {"cuda": "12.2"}, None),  # 12.2 is 12.2.0
        ("driver>=535.104.5", {"driver": "535.104.05"}, None),  # numbers, not text
        ("driver<535.9", {"driver": "535.104.05"}, "driver<535.9"),  # 104 > 9
        ("brand=TESLA", {"brand": "tesla"}, None),  # a brand in any case
        ("brand!=geforce", {"brand": "tesla"}, None),
        ("arch>=8.0", {"arch": "9.0"}, None),
        ("arch>=8.0", {"arch": "7.5"}, "arch>=8.0"),
        # a fact that cannot be told satisfies every constraint on it
        ("cuda>=99 brand=nope", {}, None),
        ("arch>=10.0", {"arch": None}, None),
        # empty terms and constraints are skipped
        ("  cuda>=12.0  ", {"cuda": "12.2"}, None),
        ("cuda>=13,,driver>=1 cuda>=12", {"cuda": "12.2", "driver": "535"}, None),
        ("", {}, None),
    ],
)
def test_evaluation(expression, facts, failed):
    assert require.evaluate(expression, _fact(**facts), "NVIDIA_REQUIRE_X") == failed


def test_evaluation_stops_as_nvidias_does():
    """A constraint after a failed one in its term, and a term after one that held, are
    never read (a malformed one there is not an error); one evaluation reaches is."""
    fact = _fact(cuda="12.2")
    assert require.evaluate("cuda>=12.0 garbage", fact, "X") is None
    assert require.evaluate("cuda>=13.0,garbage cuda>=12.0", fact, "X") is None
    with pytest.raises(OcihookError, match="X: 'garbage': no operator"):
        require.evaluate("cuda>=13.0 garbage", fact, "X")


@pytest.mark.parametrize(
    "constraint, words",
    [
        ("notvalid", "no operator"),
        ("=12", "no property before the operator"),
        ("cuda==12", "'==' is no operator"),
        ("cuda=>12", "'=>' is no operator"),
        ("cuda>=", "no value after the operator"),
        ("os=ubuntu", "unknown property 'os'"),
        ("cuda>=twelve", "'twelve' is no version"),
        ("cuda>=.5", "'.5' is no version"),
        ("driver>=535.104.05-1", "is no version"),
        ("cuda>=12.2\tbrand=tesla", "is no version"),  # only spaces separate terms
        ("brand>=tesla", "a brand is compared by = and != only"),
    ],
)
def test_malformed_constraints_are_one_line(constraint, words):
    with pytest.raises(OcihookError) as error:
        require.evaluate(constraint, _fact(cuda="12.2", brand="tesla"), "NVIDIA_REQUIRE_CUDA")
    text = str(error.value)
    assert text.startswith("NVIDIA_REQUIRE_CUDA: ") and words in text and "\n" not in text


def test_every_selected_gpu_must_meet_it():
    """libnvidia-container evaluates for each selected GPU with its own brand and arch."""
    host = Host(
        "550.54.14",
        "12.4",
        [Gpu("GPU 0", 0), Gpu("GPU 1", 1)],
        lambda: ({0: ("tesla", "9.0"), 1: ("tesla", "7.0")}, None),
    )
    failure = require.unmet([("NVIDIA_REQUIRE_ARCH", "arch>=8.0")], host)
    assert failure.gpu.label == "GPU 1" and failure.failed == "arch>=8.0"


def test_nvml_is_asked_only_when_a_brand_or_arch_is_read():
    host = _host("580.65.06", "13.0", "tesla", "9.0")
    require.check(require.requirements({"NVIDIA_REQUIRE_CUDA": CUDA_12_6_3}), host)
    assert host.asked is None  # cuda>=12.6 held: no brand term was read
    host = _host("550.54.14", "12.4", "tesla", "9.0")
    require.check(require.requirements({"NVIDIA_REQUIRE_CUDA": CUDA_12_6_3}), host)
    assert host.asked is not None


def test_nvmls_cuda_version_serves_a_driver_the_table_does_not_know():
    host = Host("600.10.01", None, [Gpu("GPU 0", 0)], lambda: ({}, "13.4"))
    require.check([("NVIDIA_REQUIRE_CUDA", "cuda>=13.2")], host)
    with pytest.raises(OcihookError, match="CUDA 13.4"):
        require.check([("NVIDIA_REQUIRE_CUDA", "cuda>=13.5")], host)


def test_the_configs_brand_stands_for_nvmls():
    host = _host("550.54.14", "12.4", "geforce", "9.0")
    host = host.replace(brand="tesla")
    require.check([("NVIDIA_REQUIRE_CUDA", CUDA_12_6_3)], host)


# -- the refusal's words ---------------------------------------------------------------------


def test_a_driver_update_is_advised_only_where_one_helps():
    def refused(expression: str, host: Host) -> str:
        with pytest.raises(OcihookError) as error:
            require.check([("NVIDIA_REQUIRE_CUDA", expression)], host)
        return str(error.value)

    r550 = HOSTS["r550-h200"]
    line = refused("cuda>=12.8", r550())
    assert line == (
        "NVIDIA_REQUIRE_CUDA: the image requires cuda>=12.8, not met on this host (driver "
        "550.54.14, CUDA 12.4): a driver 570.26 or newer (CUDA 12.8) meets it: update the "
        "driver, use an image of an older CUDA, or set NVIDIA_DISABLE_REQUIRE=true"
    )
    line = refused("arch>=10.0", r550())
    assert "(driver 550.54.14, CUDA 12.4; GPU 0: arch 9.0)" in line
    assert line.endswith(
        "no newer driver meets it: use another image or GPU, or set NVIDIA_DISABLE_REQUIRE=true"
    )
    line = refused("cuda>=12.8 brand=tesla,driver>=550,driver<551", r550())
    assert "requires cuda>=12.8 (or its other term)" in line
    assert "GPU 0: brand nvidia" in line and "a driver 570.26 or newer" in line
    line = refused("driver<471", r550())
    assert "no newer driver meets it" in line
