"""The request of a container, assembled once for every stage: the prestart stage adapts
the OCI state and config.json, the precreate stage the proposed OCI config, into a
`request.state.Container`; `container_request` reads it the same way for both.

Imported only once `request.state.may_ask` says a container may ask (the stages import it
then), and request/parse.py only once a container really asks.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds of imports at container start
if TYPE_CHECKING:
    from ocihook.request.parse import DeviceRequest
    from ocihook.request.state import Container


def container_request(container: Container, config: dict) -> DeviceRequest:
    """The devices the container asks for, checked against the config's allow-list: the one
    assembly of a request, whichever stage adapted the container (request/parse.py is
    imported here: the poststop and no-request paths never need it)."""
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
