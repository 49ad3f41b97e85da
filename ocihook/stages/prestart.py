"""The prestart stage (createRuntime; prestart for older runtimes): the OCI state on stdin,
config.json in its bundle. Adapts them into a container and its request (request/assemble.py,
once `request.state.may_ask` says the container may ask), then the injection runs the
pipeline and the executor (apply/inject.py). With a `stopped` state (a registration that
adds poststop) it ends the container's record instead.

Kept lean: stdlib only until a container really asks for devices; the no-request path
reads the state's annotations and nothing else.
"""

from __future__ import annotations

from ocihook.config.compiled import load_config
from ocihook.errors import OcihookError
from ocihook.linux.userns import hook_namespace
from ocihook.request.state import PRESTART_STATUSES, load_container, may_ask, read_state


def run(data: bytes, config_path: str, cache_dir: str | None) -> int:
    """The stage for the state `data`: 0 when the container asks for nothing or got what it
    asked for; OcihookError (one line) when it is refused."""
    state = read_state(data)
    namespace = hook_namespace()
    if namespace.rootless:  # the hook of a rootless container: the user's own dirs
        from ocihook.request import rootless

        cache_dir = rootless.cache_dir(namespace)
    config = load_config(config_path, cache_dir)
    if namespace.rootless:
        config["state_dir"] = rootless.user_dir(namespace)
    if state["status"] == "stopped":
        return stopped(config, state["id"])
    if state["status"] not in PRESTART_STATUSES:
        raise OcihookError(
            f"state on stdin: status '{state['status']}': the hook runs at prestart/createRuntime "
            "(creating) and poststop (stopped)"
        )
    if not may_ask(state, config):
        return 0
    import time  # built in: what a failed or injected start took goes into its record

    from ocihook.request import assemble  # a container that may ask: its request

    started = time.monotonic()
    step = "bundle"
    try:
        container = load_container(state)
        step = "request"
        request = assemble.container_request(container, config)
    except Exception as error:  # the start fails: say so in <state_dir>/failed (records.py)
        from ocihook.records import PRESTART, write_failure

        write_failure(config, state["id"], PRESTART, step, False, started, error)
        raise
    if request.empty:
        return 0
    from ocihook.apply.inject import inject

    inject(container, config, request, started)  # records its failures itself
    return 0


def stopped(config: dict, container_id: str) -> int:
    """poststop (not in the shipped registrations): the container's record ends now, and crun
    1.23+'s pinned device programs of ours go with it (else the next start's sweep does both)."""
    from ocihook.records import finish_record, pinned_units

    units = pinned_units(finish_record(config["state_dir"], container_id))
    if units:
        from ocihook.cgroups import pinned

        for unit in units:
            pinned.remove(unit)
    return 0
