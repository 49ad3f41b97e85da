"""Property-based tests of every parser: any input parses or raises OcihookError with a
one-line message; never another exception."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ocihook.config.compiled import compile_config
from ocihook.errors import OcihookError
from ocihook.request.parse import DeviceRequest, check_allowed, parse_request
from ocihook.request.state import load_container, read_state

SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
STATE_KEYS = ["ociVersion", "id", "status", "pid", "bundle", "annotations"]


def _one_line(error: OcihookError) -> None:
    text = str(error)
    assert text and "\n" not in text


@st.composite
def states(draw):
    base = {
        "ociVersion": draw(st.sampled_from(["1.0.2", 1, None])),
        "id": draw(st.sampled_from(["abc", "../x", "", "a" * 200]) | st.text(max_size=10)),
        "status": draw(st.sampled_from(["creating", "stopped", "x"]) | json_values),
        "pid": draw(st.integers(-5, 1 << 40) | json_values),
        "bundle": draw(st.sampled_from(["/tmp", "rel", "/a\0b"]) | st.text(max_size=10)),
        "annotations": draw(
            st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3) | json_values
        ),
    }
    keep = draw(st.lists(st.sampled_from(STATE_KEYS), unique=True))
    return {k: v for k, v in base.items() if k in keep or draw(st.booleans())}


@SETTINGS
@given(st.one_of(states().map(lambda s: json.dumps(s).encode()), st.binary(max_size=200)))
def test_read_state(data):
    try:
        state = read_state(data)
    except OcihookError as error:
        _one_line(error)
        return
    assert isinstance(state["id"], str) and state["bundle"].startswith("/")


@st.composite
def bundle_configs(draw):
    root = draw(
        st.fixed_dictionaries(
            {"path": st.sampled_from(["rootfs", "/", "../x", "", "/dev", "a/../b"]) | json_values}
        )
        | json_values
    )
    process = draw(
        st.fixed_dictionaries(
            {"env": st.lists(st.text(max_size=10) | json_values, max_size=3) | json_values}
        )
        | json_values
    )
    linux = draw(
        st.fixed_dictionaries(
            {
                "uidMappings": st.lists(
                    st.fixed_dictionaries(
                        {
                            k: st.integers(-2, 5) | json_values
                            for k in ("containerID", "hostID", "size")
                        }
                    )
                    | json_values,
                    max_size=2,
                )
                | json_values,
                "namespaces": st.lists(json_values, max_size=2) | json_values,
                "mountLabel": json_values,
                "cgroupsPath": json_values,
            }
        )
        | json_values
    )
    config = {"root": root, "process": process, "linux": linux, "annotations": draw(json_values)}
    keep = draw(st.lists(st.sampled_from(list(config)), unique=True))
    return {k: v for k, v in config.items() if k in keep}


@SETTINGS
@given(st.one_of(bundle_configs().map(json.dumps).map(str.encode), st.binary(max_size=100)))
def test_load_container(tmp_path, data):
    (tmp_path / "config.json").write_bytes(data)
    state = {"ociVersion": "1.0.2", "id": "x", "status": "creating", "bundle": str(tmp_path)}
    try:
        container = load_container(state)
    except OcihookError as error:
        _one_line(error)
        return
    assert container.rootfs.startswith("/")


@st.composite
def yaml_configs(draw):
    profile = st.fixed_dictionaries(
        {"name": st.sampled_from(["p", "bad name", ""]) | json_values},
        optional={
            "libraries": st.lists(st.text(max_size=6), max_size=2) | json_values,
            "devices": st.fixed_dictionaries(
                {"node": st.sampled_from(["/dev/x{index}", "/dev/x"]) | json_values}
            )
            | json_values,
            "env_prefix": json_values,
        },
    )
    config = st.fixed_dictionaries(
        {},
        optional={
            "profile": st.sampled_from(["missing-profile", "/nonexistent.yaml"]) | profile,
            "source_root": st.sampled_from(["/", "rel"]) | json_values,
            "request": st.fixed_dictionaries(
                {},
                optional={
                    "env": json_values,
                    "allow": st.lists(
                        st.fixed_dictionaries(
                            {"devices": st.sampled_from(["all", [0, 1], [-1]]) | json_values},
                            optional={"annotations": json_values},
                        ),
                        max_size=2,
                    )
                    | json_values,
                },
            ),
            "log": json_values,
            "selinux": json_values,
            "bogus": json_values,
        },
    )
    return draw(config | json_values)


@SETTINGS
@given(st.one_of(yaml_configs().map(yaml.safe_dump), st.text(max_size=80)))
def test_compile_config(tmp_path, text):
    path = Path(tmp_path) / "config.yaml"
    path.write_text(text)
    os.chmod(path, 0o644)
    try:
        config, _ = compile_config(str(path))
    except OcihookError as error:
        _one_line(error)
        return
    assert isinstance(config["profile"], dict)


@SETTINGS
@given(st.one_of(st.text(max_size=40), st.from_regex(r"\A[0-9, -]{0,20}\Z"), st.just("x" * 2000)))
def test_parse_request(value):
    try:
        request = parse_request(value, "annotation x")
    except OcihookError as error:
        _one_line(error)
        return
    assert request.indices is None or all(0 <= i <= 4095 for i in request.indices)


@SETTINGS
@given(
    st.one_of(st.none(), st.lists(st.integers(0, 8), max_size=4).map(tuple)),
    st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3),
    st.lists(
        st.fixed_dictionaries(
            {"devices": st.just("all") | st.lists(st.integers(0, 8), max_size=4)},
            optional={
                "annotations": st.dictionaries(
                    st.sampled_from(["a", "^a$", "(", ".*", "b"]),
                    st.sampled_from(["", "x", "[", "^$"]),
                    max_size=2,
                )
            },
        ),
        max_size=3,
    ),
)
def test_check_allowed(indices, annotations, allow):
    request = DeviceRequest(indices, "annotation x")
    try:
        check_allowed(request, annotations, allow)
    except OcihookError as error:
        _one_line(error)
        return
    assert any(e["devices"] == "all" or indices is not None for e in allow)


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_JSON_VALUES)
def test_fastjson_round_trips_like_json(value):
    """The hot path's JSON (no `json` import) writes what `json` reads, and reads it back."""
    import json

    from ocihook import fastjson

    text = fastjson.dumps(value)
    assert json.loads(text) == value
    assert text == json.dumps(value, indent=1, sort_keys=True)
    assert fastjson.loads(text) == value


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_fastjson_loads_rejects_like_json(data):
    """fastjson reads bytes as UTF-8, as the OCI state and config.json are: `json` guesses
    UTF-16 or UTF-32 from NUL bytes (b'\\x000' is 0 to it), which the hook never accepts, so
    bytes are compared with what `json` makes of them decoded as UTF-8."""
    import json

    from ocihook import fastjson

    try:
        expected = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except (ValueError, UnicodeDecodeError):
        expected = ValueError
    try:
        got = fastjson.loads(data)
    except ValueError:
        got = ValueError
    if expected is not ValueError or got is not ValueError:
        assert got == expected or (got != got and expected != expected)
