"""`ocihook cdi generate` and `ocihook cdi-hook ...` (the hooks a generated spec names)."""

from __future__ import annotations

import os
import shutil
import sys

import click

from ocihook.cli.commands import config_option
from ocihook.cli.output import json_option, mark_json, usage_error
from ocihook.errors import OcihookError

SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


def _default_hook_path() -> str:
    """The ocihook executable running now (as invoked), else the one on PATH."""
    for candidate in (sys.argv[0], "ocihook"):
        found = shutil.which(candidate)
        if found and os.path.basename(found) == "ocihook":
            return os.path.abspath(found)
    return "/usr/bin/ocihook"


@click.group()
def cdi() -> None:
    """Container Device Interface (CDI) specs, for runtimes that read no hooks.d (containerd)
    or where declarative devices are wanted (podman --device VENDOR/CLASS=N)."""


@cdi.command()
@config_option
@click.option(
    "--output",
    "-o",
    default="-",
    show_default=True,
    help="Spec file to write atomically (e.g. /etc/cdi/ocihook.yaml or /var/run/cdi/...), "
    "or a directory (the file is then KIND with '/' as '_'); '-' prints it.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["yaml", "json"]),
    default=None,
    help="Output format (default: from the file's extension, else yaml).",
)
@json_option(help="The same as --format json (a different --format with it is a usage error).")
@click.option(
    "--kind",
    default=None,
    help="VENDOR/CLASS of the devices [the profile's devices.cdi_kind (nvidia: "
    "nvidia.com/gpu), else ocihook.io/<profile>].",
)
@click.option(
    "--lib-dir",
    default=None,
    help="Container library dir. A CDI spec is static, so the image layout cannot be "
    "detected: the config's container.lib_dir, or with 'auto' the dir the libraries "
    "have in the source root (the host's layout; the ld cache hook lists it).",
)
@click.option(
    "--hook-path",
    default=None,
    help="Absolute path of the ocihook executable the runtime runs for the createContainer "
    "hooks [the ocihook found on PATH].",
)
@click.option(
    "--no-additional-gids",
    "no_gids",
    is_flag=True,
    help="Leave out `additionalGids` (the groups a non-root container user needs to open a "
    "device node that is not everyone's: CDI 0.7.0, which podman 4.3 cannot read), as "
    "NVIDIA's no-additional-gids-for-device-nodes does.",
)
def generate(
    config_path: str,
    output: str,
    fmt: str | None,
    as_json: bool,
    kind: str | None,
    lib_dir: str | None,
    hook_path: str | None,
    no_gids: bool,
) -> None:
    """Write a CDI spec for the configured profile and source root.

    One device per index (VENDOR/CLASS=0, =1, ...), per GPU UUID (=GPU-...) and per MIG
    device (=0:1 and =MIG-...: NVML's names, as NVIDIA's generator writes them) and `all`
    (every index); shared edits for every
    device: the driver files as read-only bind mounts, the control device nodes, and
    createContainer hooks that run `ocihook cdi-hook` for the soname links and the ld
    cache. cdiVersion is the lowest version the features used need (0.5.0: device
    nodes with hostPath, names starting with a digit), which podman 4.3 accepts.
    The spec is validated against ocihook's CDI schema before it is written.
    """
    from ocihook.cdi import spec as cdispec
    from ocihook.config.compiled import compile_config
    from ocihook.pipeline import finalized_plan
    from ocihook.plan.decide import Target, label_choice
    from ocihook.plan.model import executor_view
    from ocihook.request.parse import parse_request

    if as_json and fmt not in (None, "json"):
        raise usage_error(f"--json is --format json: not with --format {fmt}")
    fmt = "json" if as_json else fmt
    if fmt == "json":
        mark_json()
    config, _ = compile_config(config_path)
    hook_path = hook_path or _default_hook_path()
    if not os.path.isabs(hook_path):
        raise OcihookError(f"--hook-path {hook_path}: must be an absolute path")
    profile = config["profile"]
    imex_kind = _imex_kind(profile)
    specs = []  # (kind, spec)
    if kind is None or kind != imex_kind:
        request = parse_request("all", "cdi generate")
        target = Target.static(lib_dir)
        plan = finalized_plan(config, request, target, verify=True, describe="strict")
        gpu_kind = kind or cdispec.default_kind(profile["name"], profile["devices"].get("cdi_kind"))
        label = cdispec.parse_label(label_choice(config["selinux"], target))  # as cdi-hook reads it
        view = executor_view(plan)
        steps = _cuda_steps(config, view)
        ldconfig = config["ldconfig"]["path"]
        spec = cdispec.build_spec(
            view, gpu_kind, hook_path, ldconfig, label, steps, gids=not no_gids
        )
        specs.append((gpu_kind, spec))
    # The IMEX channels: a spec of their own kind, asked for by it, or beside the GPUs' in a dir.
    directory = output != "-" and os.path.isdir(output)
    if imex_kind and (kind == imex_kind or (kind is None and directory)):
        channels = _imex_spec(config, imex_kind, required=kind == imex_kind)
        if channels is not None:
            specs.append((imex_kind, channels))
    for spec_kind, spec in specs:
        cdispec.validate(spec)
        _write(spec, spec_kind, output, fmt)


def _imex_kind(profile: dict) -> str | None:
    """The CDI kind of the profile's NVIDIA IMEX channels (NVIDIA's nvidia.com/imex-channel),
    None for a profile without NVIDIA devices."""
    from ocihook.request.imex import settings

    nvidia = settings(profile["devices"])
    return nvidia["imex_cdi_kind"] if nvidia else None


def _imex_spec(config: dict, kind: str, required: bool) -> dict | None:
    """The spec of the host's IMEX channels; None where it has none (an error when that
    spec was asked for by its kind)."""
    from ocihook.cdi import spec as cdispec
    from ocihook.discover import imex
    from ocihook.pipeline import open_roots
    from ocihook.plan.model import DeviceNode

    spec = config["profile"]["devices"]
    with open_roots(config) as roots:
        if not imex.host_channels(roots, spec) and not required:
            return None
        nodes = imex.plan_channels(roots, spec, None, spec["access"], "cdi generate")
    mode = spec.get("mode")
    if mode:
        nodes = [n.replace(mode=int(mode, 8)) for n in nodes]
    return cdispec.build_channel_spec([DeviceNode.to_dict(n) for n in nodes], kind)


def _cuda_steps(config: dict, view: dict) -> dict | None:
    """What a CUDA profile's spec carries to its hooks: the compat library the update-ldcache
    hook probes each image for, and (cuda.require) the check-requirements hook's arguments:
    the driver and CUDA versions and each GPU's brand and compute capability (NVML's, asked
    now; unknown where it cannot tell, which satisfies NVIDIA's constraints on them)."""
    settings = config["profile"].get("cuda")
    if not settings:
        return None
    steps: dict = {"library": settings["library"], "require": None}
    if not config["cuda"]["require"]:
        return steps
    from ocihook.discover.nvidia import GpuFacts
    from ocihook.pipeline import open_roots
    from ocihook.plan.cuda import cuda_for_driver

    driver = view["driver_version"]
    with open_roots(config) as roots:
        facts = GpuFacts(roots, config["profile"], driver)
        by_minor, nvml_cuda = facts()
    if facts.error:
        click.echo(
            f"warning: {facts.error}: the spec's requirement check takes every GPU's brand "
            "and compute capability as unknown",
            err=True,
        )
    cuda = cuda_for_driver(driver) or nvml_cuda
    args = []
    if driver:
        args += ["--driver-version", driver]
    if cuda:
        args += ["--cuda-version", cuda]
    if config["cuda"]["brand"]:
        args += ["--brand", config["cuda"]["brand"]]
    numbers = {d["path"]: (d["major"], d["minor"]) for d in view["devices"]}
    for device in view["device_list"]:
        if device.get("index") is None or not device["nodes"]:
            continue
        major, minor = numbers[device["nodes"][0]]
        brand, arch = by_minor.get(minor, (None, None))
        args += ["--gpu", f"{device['index']}={major}:{minor},{brand or '-'},{arch or '-'}"]
    steps["require"] = args
    return steps


def _write(spec: dict, kind: str, output: str, fmt: str | None) -> None:
    from ocihook.cdi import spec as cdispec

    if output != "-" and os.path.isdir(output):
        output = os.path.join(output, kind.replace("/", "_") + "." + (fmt or "yaml"))
    if fmt is None:
        fmt = "json" if output.endswith(".json") else "yaml"
    text = cdispec.render(spec, fmt)
    if output == "-":
        click.echo(text, nl=False)
        return
    if not output.endswith((".yaml", ".json")):
        raise OcihookError(f"--output {output}: runtimes read only *.yaml and *.json spec files")
    from ocihook.linux.atomic import write_atomic

    write_atomic(output, text)
    names = ", ".join(f"{kind}={d['name']}" for d in spec["devices"])
    click.echo(f"wrote {output} (cdiVersion {spec['cdiVersion']}): {names}", err=True)


@click.group("cdi-hook")
def cdi_hook() -> None:
    """The createContainer hooks of a spec from `ocihook cdi generate` (the runtime runs
    them, OCI state JSON on stdin). Paths are resolved in the rootfs by fd, as the hook does;
    failures follow the hook's error contract (ocihook.cli.main.main: errors.exit_line)."""


@cdi_hook.command("create-symlinks")
@click.option(
    "--link",
    "links",
    multiple=True,
    required=True,
    help="TARGET::LINK: create the symlink LINK (absolute, in the container) pointing to TARGET.",
)
@click.option(
    "--selinux-label",
    "label",
    default=None,
    metavar="none|mount-label|LABEL",
    help="The label of the links, as the config that generated the spec decided: none, the "
    "container's mount label, or a fixed SELinux context [not given (a spec of an earlier "
    "release): the default config's, the mount label where SELinux is enabled].",
)
def create_symlinks(links: tuple[str, ...], label: str | None) -> None:
    """Create soname links in the container (an identical existing link is kept; an image
    file in the way fails the container)."""
    from ocihook.cdi.spec import parse_label
    from ocihook.stages import cdihook

    parsed = [cdihook.parse_link(value) for value in links]
    choice = parse_label(label)
    kwargs = {} if choice is None else {"label": choice}
    cdihook.create_symlinks(cdihook.read_container(), parsed, **kwargs)


@cdi_hook.command("check-requirements")
@click.option("--driver-version", default=None, help="The host driver's version.")
@click.option("--cuda-version", default=None, help="The CUDA version the host driver supports.")
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    metavar="INDEX=MAJOR:MINOR,BRAND,ARCH",
    help="A GPU of the host: its index, its node's numbers, NVML's brand and compute "
    "capability ('-' where NVML could not tell).",
)
@click.option("--brand", default=None, help="The node's brand for every GPU (cuda.brand).")
def check_requirements(
    driver_version: str | None, cuda_version: str | None, gpus: tuple[str, ...], brand: str | None
) -> None:
    """Refuse the container, in one line, when its image's NVIDIA_REQUIRE_* does not hold on
    this host (as NVIDIA decides it; docs/vendors/nvidia.md), for the GPUs whose nodes it got.
    The host's facts are the spec's arguments, written by `ocihook cdi generate`."""
    from ocihook.stages import cdihook

    parsed = [cdihook.parse_gpu(value) for value in gpus]
    cdihook.check_requirements(
        cdihook.read_container(), driver_version, cuda_version, parsed, brand
    )


@cdi_hook.command("update-ldcache")
@click.option(
    "--folder",
    "folders",
    multiple=True,
    required=True,
    help="Library dir in the container to add to its ld cache (repeatable).",
)
@click.option(
    "--ldconfig",
    "ldconfig_path",
    default="/sbin/ldconfig",
    show_default=True,
    help="The host's static ldconfig, run sandboxed in the rootfs.",
)
@click.option(
    "--ld-writer",
    type=click.Choice(["ldconfig", "none"]),
    default=None,
    help="Whether the ld cache is written (by the sandboxed ldconfig), as the config that "
    "generated the spec decided [not given (a spec of an earlier release): the default "
    "config's, ldconfig].",
)
@click.option(
    "--cuda-compat",
    "compat_dir",
    default=None,
    metavar="DIR",
    help="The image's CUDA compat dir: listed first where NVIDIA's rule takes its library "
    "for the host driver (--host-driver-version).",
)
@click.option("--cuda-library", default="libcuda.so", show_default=True, help="The compat library.")
@click.option("--host-driver-version", default=None, help="The host driver's version.")
def update_ldcache(
    folders: tuple[str, ...],
    ldconfig_path: str,
    ld_writer: str | None,
    compat_dir: str | None,
    cuda_library: str,
    host_driver_version: str | None,
) -> None:
    """Update the container's ld cache for FOLDERs (glibc images; others are left alone),
    the image's CUDA compat dir first where NVIDIA's rule takes it."""
    from ocihook.stages import cdihook

    kwargs: dict = {}
    if ld_writer is not None:
        kwargs["ld_writer"] = None if ld_writer == "none" else ld_writer
    if compat_dir is not None:
        kwargs["compat"] = (compat_dir, cuda_library, "ldconfig", host_driver_version)
    cdihook.update_ldcache(cdihook.read_container(), ldconfig_path, list(folders), **kwargs)
