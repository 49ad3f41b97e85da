"""The hook the runtime runs (hooks.d points at a script that calls `main`).

    ocihook-hook [--config PATH] [--cache-dir DIR]    OCI state JSON on stdin
    ocihook-hook --stage precreate [...]            podman's precreate: the proposed OCI
                                                    config on stdin, the edited one on stdout

Kept lean: stdlib only until a container really asks for devices, no click, and no
PyYAML or jsonschema while the compiled config is fresh. Every expected or
environmental failure is one line on stderr ("ocihook: ...", naming the path and the
cause) and exit status 1; exit status 70 ("ocihook: internal error: ...") is a bug.
"""

from __future__ import annotations

import sys

from ocihook.config.compiled import DEFAULT_CACHE_DIR, DEFAULT_CONFIG, load_config
from ocihook.errors import OcihookError, exit_line
from ocihook.linux.userns import hook_namespace
from ocihook.request.state import (
    MAX_STATE_BYTES,
    PRESTART_STATUSES,
    Container,
    load_container,
    read_state,
)

TYPE_CHECKING = False  # typing costs milliseconds of imports at container start: annotations only
if TYPE_CHECKING:
    from ocihook.request.parse import DeviceRequest

USAGE = (
    "usage: ocihook-hook [--stage precreate] [--config PATH] [--cache-dir DIR]  "
    "(OCI state JSON on stdin; at precreate the OCI config)"
)
STAGES = ("prestart", "precreate")  # prestart: every stage that gets the state (poststop too)
CRIO_CONTAINER_ANNOTATIONS = "io.kubernetes.cri-o.Annotations"  # request.parse's, not imported


def _parse_args(argv: list[str]) -> dict[str, str]:
    options = {"--config": DEFAULT_CONFIG, "--cache-dir": DEFAULT_CACHE_DIR, "--stage": "prestart"}
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        name, eq, value = flag.partition("=")
        if name not in options:
            raise OcihookError(f"unknown argument {flag!r}; {USAGE}")
        if not eq:
            if not args:
                raise OcihookError(f"{name} needs a value")
            value = args.pop(0)
        options[name] = value
    if options["--stage"] not in STAGES:
        raise OcihookError(f"--stage {options['--stage']!r}: one of {', '.join(STAGES)}")
    return options


def main(argv: list[str] | None = None) -> int:
    try:
        options = _parse_args(sys.argv[1:] if argv is None else argv)
        if options["--stage"] == "precreate":
            return precreate(options["--config"], options["--cache-dir"])
        data = sys.stdin.buffer.read(MAX_STATE_BYTES + 1)
        return run(data, options["--config"], options["--cache-dir"])
    except Exception as error:  # one line and the contract's status (errors.exit_line)
        status, line = exit_line(error)
        sys.stderr.write(line + "\n")
        return status


def precreate(config_path: str, cache_dir: str | None) -> int:
    """podman's precreate stage: the proposed config from stdin to stdout, edited when the
    container asks for devices (ocihook/apply/precreate.py); nothing on stdout when it fails."""
    from ocihook.apply import precreate as stage
    from ocihook.request.state import MAX_CONFIG_BYTES

    data = sys.stdin.buffer.read(MAX_CONFIG_BYTES + 1)
    spec = stage.read_spec(data)  # bad input: one line, before the config is loaded
    if hook_namespace().rootless:
        out = data  # the prestart stage does everything (as root of the user's namespace)
    else:
        config = load_config(config_path, cache_dir)
        out = stage.run(data, spec, config, _may_ask, container_request)
    sys.stdout.buffer.write(out)
    return 0


def run(data: bytes, config_path: str, cache_dir: str | None) -> int:
    state = read_state(data)
    namespace = hook_namespace()
    if namespace.rootless:  # the hook of a rootless container: the user's own dirs
        from ocihook.request import rootless

        cache_dir = rootless.cache_dir(namespace)
    config = load_config(config_path, cache_dir)
    if namespace.rootless:
        config["state_dir"] = rootless.user_dir(namespace)
    if state["status"] == "stopped":
        from ocihook.records import finish_record, pinned_units

        units = pinned_units(finish_record(config["state_dir"], state["id"]))
        if units:  # crun 1.23+ under systemd: our pinned device programs go with the container
            from ocihook.cgroups import pinned

            for unit in units:
                pinned.remove(unit)
        return 0
    if state["status"] not in PRESTART_STATUSES:
        raise OcihookError(
            f"state on stdin: status '{state['status']}': the hook runs at prestart/createRuntime "
            "(creating) and poststop (stopped)"
        )
    if not _may_ask(state, config):
        return 0
    import time  # built in: what a failed or injected start took goes into its record

    started = time.monotonic()
    step = "bundle"
    try:
        container = load_container(state)
        step = "request"
        request = container_request(container, config)
    except Exception as error:  # the start fails: say so in <state_dir>/failed (records.py)
        from ocihook.records import PRESTART, write_failure

        write_failure(config, state["id"], PRESTART, step, False, started, error)
        raise
    if request.empty:
        return 0
    from ocihook.apply.inject import inject

    inject(container, config, request, started)  # records its failures itself
    return 0


def _may_ask(state: dict, config: dict) -> bool:
    """False when the state alone shows the container asks for nothing: the runtime copies
    config.json's annotations into the state, so without the env channel there is no
    need to read config.json at all (the common case, kept cheapest)."""
    annotations = state.get("annotations")
    if config["kubernetes"]["device_plugin"]:  # Kubernetes mode: the allocation, CRI-O's key
        text = None if annotations is None else annotations.get(CRIO_CONTAINER_ANNOTATIONS)
        return annotations is None or (
            text is not None and f'"{config["request"]["annotation"]}":' in text
        )
    if config["request"]["env"]:
        return True
    return annotations is None or config["request"]["annotation"] in annotations


def container_request(container: Container, config: dict) -> DeviceRequest:
    """The devices the container asks for, checked against the config's allow-list (request.py
    is imported here: the poststop and no-request paths never need it)."""
    settings = config["request"]
    prefix = config["profile"]["env_prefix"]
    env_key = f"{prefix}_VISIBLE_DEVICES" if settings["env"] and prefix else None
    # What the container asks with: its annotations (a pod author's to set), or in
    # Kubernetes mode only its own CRI annotations, which kubelet fills from the device
    # plugin's answer: the devices, and the capabilities and IMEX channels beside them.
    asked = container.annotations
    if config["kubernetes"]["device_plugin"]:
        from ocihook.request.parse import allocated_devices, container_annotations

        request = allocated_devices(container.annotations, settings["annotation"])
        asked = container_annotations(container.annotations)
    else:
        from ocihook.request.parse import requested_devices

        request = requested_devices(
            container.annotations, container.env, settings["annotation"], env_key
        )
    if request.empty:
        return request
    _imex_request(request, asked, container.env, config)
    if settings["allow"]:
        from ocihook.request.parse import check_allowed

        check_allowed(
            request, container.annotations, settings["allow"], settings["trusted_annotations"]
        )
    from ocihook.request.parse import requested_capabilities

    profile = config["profile"]
    request.capabilities = requested_capabilities(
        asked,
        container.env,
        settings["capabilities_annotation"],
        f"{prefix}_DRIVER_CAPABILITIES" if settings["env"] and prefix else None,
        list(profile["capabilities"]),
        [n for n, c in profile["capabilities"].items() if c.get("by_name")],
    )
    annotated = settings["capabilities_annotation"] in asked
    if settings["env"] and prefix and not annotated:
        _switched(request, container, profile, prefix)
    return request


def _switched(request: DeviceRequest, container: Container, profile: dict, prefix: str) -> None:
    """The capabilities the image's switches ask for (<PREFIX>_GDS=enabled: a capability's
    `switch`), with request.env and no capabilities annotation, added to the request's;
    those only a switch asked for are `switched` (given where the host has them)."""
    switches = {
        f"{prefix}_{part['switch']}": name
        for name, part in profile["capabilities"].items()
        if part.get("switch")
    }
    if not switches:
        return
    from ocihook.request.parse import switched_capabilities

    enabled = switched_capabilities(container.env, switches)
    if not enabled:
        return
    base = request.capabilities
    if base is None:
        base = list(profile["default_capabilities"])
    added = [c for c in enabled if c not in base]
    request.capabilities = base + added
    request.switched = tuple(added)


def _imex_request(
    request: DeviceRequest, annotations: dict[str, str], env: dict[str, str], config: dict
) -> None:
    """NVIDIA IMEX channels (imex.py), with a device request: the annotation (of
    `annotations`: the container's, or in Kubernetes mode its allocation's), or with
    request.env the image's <PREFIX>_IMEX_CHANNELS when the profile has NVIDIA devices."""
    settings = config["request"]
    profile = config["profile"]
    nvidia = profile["devices"].get("nvidia") is not None
    prefix = profile["env_prefix"]
    env_key = f"{prefix}_IMEX_CHANNELS" if settings["env"] and nvidia and prefix else None
    key = settings["imex_annotation"]
    if key not in annotations and not (env_key and env_key in env):
        return
    from ocihook.request.imex import requested_channels

    request.imex, request.imex_origin = requested_channels(annotations, env, key, env_key)


if __name__ == "__main__":
    raise SystemExit(main())
