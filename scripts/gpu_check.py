#!/usr/bin/env python3
"""Check ocihook's NVIDIA device names on a real NVIDIA GPU machine (issue 26), as root:

1. facts: the host's GPUs as nvidia-smi names them (index, UUID, PCI bus id, MIG mode, MIG
   devices from `nvidia-smi -L`), the driver's proc files, /proc/devices, the device nodes;
2. nvml: ocihook's sandboxed NVML child (nvml.py, ctypes in a forked child) against the
   real libnvidia-ml: the same GPUs, minors, UUIDs and MIG devices as nvidia-smi;
3. plans: `ocihook plan` for each request form (all, index, node name, PCI address, GPU
   UUID, and, when MIG is enabled, each MIG device by `G:M` and by `MIG-...`): the plan
   selects the GPU (or MIG device) nvidia-smi gives that name, with its nodes;
4. apply: a plan applied into a chroot in a private mount namespace (tmpfs root, the plan's
   driver files bind-mounted read-only, the host's glibc, a tmpfs /dev holding ONLY the
   plan's device nodes, /proc with the driver's ModifyDeviceFiles masked so that NVML
   creates no node itself), where `nvidia-smi -L` runs as nobody and must list exactly the
   requested device (a control run with the control nodes only must list none).

Read-only for the GPUs: it never runs `nvidia-smi mig` or `-mig` and never changes the MIG
configuration; MIG requests are checked only where MIG is already enabled with instances.
Every step writes what it saw under --out; the last line says how many checks failed.

`--stand-in` runs the same steps against a fake host (tests/test_gpu_check.py): the truth
comes from a JSON file instead of nvidia-smi, and the apply step's probe is the host's
static busybox listing the chroot's /dev instead of nvidia-smi (it shows that the chroot has
exactly the planned nodes, not what a GPU driver makes of them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

NOBODY = 65534
TIMEOUT = 120


class Checks:
    """The checks' outcomes, printed as they come and summed up at the end."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.failed: list[str] = []
        self.passed = 0

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        print(f"{'ok    ' if ok else 'FAILED'} {name}{': ' + detail if detail else ''}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(name)
        return ok

    def save(self, name: str, text: str) -> None:
        (self.out / name).write_text(text)


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, **kwargs)


# -- the truth: nvidia-smi (or the stand-in's JSON) --------------------------------------


def bus_id(text: str) -> str:
    """nvidia-smi's "00000000:3B:00.0" as the kernel writes it: "0000:3b:00.0"."""
    text = text.strip().lower()
    domain, _, rest = text.partition(":")
    return f"{int(domain, 16):04x}:{rest}"


def smi_truth(smi: str) -> dict:
    """{"gpus": [{index, uuid, bus_id, mig_enabled, mig: [{index, uuid}]}]} from nvidia-smi
    (queries only)."""
    query = run(
        [smi, "--query-gpu=index,uuid,pci.bus_id,mig.mode.current", "--format=csv,noheader"]
    )
    if query.returncode != 0:
        raise RuntimeError(f"nvidia-smi --query-gpu: {query.stderr.strip() or query.stdout}")
    gpus = []
    for line in query.stdout.strip().splitlines():
        index, uuid, bus, mig = (f.strip() for f in line.split(","))
        gpus.append(
            {
                "index": int(index),
                "uuid": uuid,
                "bus_id": bus_id(bus),
                "mig_enabled": mig == "Enabled",
                "mig": [],
            }
        )
    listing = run([smi, "-L"]).stdout
    gpu = None
    for line in listing.splitlines():
        found = re.match(r"GPU (\d+): .*\(UUID: (GPU-[0-9a-f-]+)\)", line)
        if found:
            gpu = next(g for g in gpus if g["index"] == int(found.group(1)))
            continue
        found = re.match(r"\s+MIG .*Device\s+(\d+): \(UUID: (MIG-[0-9a-f-]+)\)", line)
        if found and gpu is not None:
            gpu["mig"].append({"index": int(found.group(1)), "uuid": found.group(2)})
    return {"gpus": gpus, "smi_list": listing}


# -- steps ---------------------------------------------------------------------------------


def facts(checks: Checks, truth: dict, smi: str | None) -> None:
    lines = [json.dumps(truth, indent=2)]
    if smi:
        lines.append(run([smi, "-L"]).stdout)
        lines.append(run([smi]).stdout)
    for path in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        lines.append(f"== {path}\n{path.read_text()}")
    caps = Path("/proc/driver/nvidia/capabilities")
    for path in sorted(caps.rglob("*")) if caps.exists() else ():
        if path.is_file():
            lines.append(f"== {path}\n{path.read_text()}")
    devices = Path("/proc/devices").read_text()
    lines.append("\n".join(x for x in devices.splitlines() if "nvidia" in x))
    lines.append(
        run(["ls", "-l", "/dev/nvidia-caps"]).stdout
        + run(["sh", "-c", "ls -l /dev/nvidia*"]).stdout
    )
    checks.save("facts.txt", "\n".join(lines))
    print(json.dumps(truth["gpus"], indent=2))
    checks.check("facts: GPUs found", bool(truth["gpus"]), f"{len(truth['gpus'])} GPU(s)")


def nvml_step(checks: Checks, config: dict, truth: dict) -> None:
    """ocihook's own NVML child against the real library: it must agree with nvidia-smi."""
    from ocihook.discover import nvidia
    from ocihook.discover.build import driver_version
    from ocihook.discover.libfinder import LibraryFinder as _LibraryFinder
    from ocihook.discover.roots import Roots

    with Roots(config["source_root"], config["device_root"]) as roots:
        finder = _LibraryFinder(roots, config["profile"])
        version, _, _ = driver_version(roots, config["profile"], finder)
        names = nvidia.Names(
            roots, config["profile"]["devices"], lambda n: finder.dirs(n, 64), version
        )
        try:
            gpus = names.nvml()
        except Exception as error:  # noqa: BLE001 - the outcome is the check
            checks.check("nvml: the sandboxed child answers", False, str(error))
            return
    checks.save("nvml.json", json.dumps([g.to_dict() for g in gpus], indent=2))
    checks.check("nvml: the sandboxed child answers", True, f"{len(gpus)} GPU(s)")
    by_index = {g.index: g for g in gpus}
    for gpu in truth["gpus"]:
        mine = by_index.get(gpu["index"])
        checks.check(
            f"nvml: GPU {gpu['index']} UUID",
            mine is not None and mine.uuid == gpu["uuid"],
            f"ocihook {mine.uuid if mine else None}, nvidia-smi {gpu['uuid']}",
        )
        if mine is None:
            continue
        checks.check(
            f"nvml: GPU {gpu['index']} MIG mode",
            mine.mig_enabled == gpu["mig_enabled"],
            f"ocihook {mine.mig_enabled}, nvidia-smi {gpu['mig_enabled']}",
        )
        theirs = [(m["index"], m["uuid"]) for m in gpu["mig"]]
        ours = [(m.index, m.uuid) for m in mine.mig]
        checks.check(f"nvml: GPU {gpu['index']} MIG devices", ours == theirs, f"{ours} vs {theirs}")


def build_plan(config: dict, devices: str, describe: str | None = None):
    """What discovery found for `devices`, as `ocihook plan` finds it (the pipeline's plan
    before the decision is stamped in)."""
    from ocihook.pipeline import open_roots, plan_container
    from ocihook.plan.decide import Target
    from ocihook.request.parse import parse_request

    request = parse_request(devices, "--devices")
    with open_roots(config) as roots:
        return plan_container(
            config, roots, request, Target.command_line(), verify=bool(describe), describe=describe
        ).plan


def requests(truth: dict, config: dict) -> list[tuple[str, str, set[str]]]:
    """(label, request, the UUIDs nvidia-smi -L must list in the chroot) for every form."""
    forms = [("all", "all", {g["uuid"] for g in truth["gpus"]})]
    plan = build_plan(config, "all", "plan")
    by_address = {d.address: d for d in plan.device_list}
    for gpu in truth["gpus"]:
        device = by_address.get(gpu["bus_id"])
        if device is None:
            continue
        uuids = {gpu["uuid"]}
        forms += [
            (f"index {device.index}", str(device.index), uuids),
            (f"node nvidia{device.index}", f"nvidia{device.index}", uuids),
            (f"PCI {gpu['bus_id']}", gpu["bus_id"], uuids),
            (f"UUID of GPU {gpu['index']}", gpu["uuid"], uuids),
        ]
        for mig in gpu["mig"]:
            both = {gpu["uuid"], mig["uuid"]}
            forms += [
                (f"MIG {gpu['index']}:{mig['index']}", f"{gpu['index']}:{mig['index']}", both),
                (f"MIG UUID {mig['uuid']}", mig["uuid"], both),
            ]
    return forms


def plans_step(checks: Checks, config: dict, truth: dict) -> list:
    from ocihook.plan.text import format_plan

    all_plan = build_plan(config, "all", "plan")
    checks.save("plan-all.txt", format_plan(all_plan))
    addresses = {d.address: d for d in all_plan.device_list}
    for gpu in truth["gpus"]:
        device = addresses.get(gpu["bus_id"])
        checks.check(
            f"plan: GPU {gpu['bus_id']} has nvidia-smi's UUID",
            device is not None and device.uuid == gpu["uuid"],
            f"ocihook {device.uuid if device else '(no device there)'}, nvidia-smi {gpu['uuid']}",
        )
    truth_migs = sorted(m["uuid"] for g in truth["gpus"] for m in g["mig"])
    checks.check(
        "plan: the host's MIG devices",
        sorted(m.uuid for m in all_plan.mig_devices) == truth_migs,
        f"{len(truth_migs)} MIG device(s)",
    )
    forms = requests(truth, config)
    for number, (label, request, uuids) in enumerate(forms):
        try:
            plan = build_plan(config, request, "plan")  # as `ocihook plan` (UUIDs read)
        except Exception as error:  # noqa: BLE001
            checks.check(f"plan {label}", False, str(error))
            continue
        checks.save(f"plan-{number:02d}.txt", f"request {request}\n{format_plan(plan)}")
        selected = {d.uuid for d in plan.device_list}
        for mig in [d for d in plan.device_list if hasattr(d, "gi")]:
            parent = next(g for g in truth["gpus"] if mig.name.startswith(f"{g['index']}:"))
            selected.add(parent["uuid"])
        checks.check(f"plan {label}", selected == uuids, f"selects {sorted(selected)}")
    missing = "GPU-00000000-0000-0000-0000-000000000000"
    try:
        build_plan(config, missing)
        checks.check("plan: a UUID the host lacks fails", False, "it planned")
    except Exception as error:  # noqa: BLE001
        listed = all(g["uuid"] in str(error) for g in truth["gpus"])
        checks.check("plan: a UUID the host lacks fails listing the host's", listed, str(error))
    return forms


# -- apply into a chroot -------------------------------------------------------------------


def needed_libraries(binaries: list[str]) -> list[str]:
    """Host paths of the glibc libraries the binaries load (ldd, on the host)."""
    found = []
    for binary in binaries:
        for line in run(["ldd", binary]).stdout.splitlines():
            path = line.split("=>")[-1].split("(")[0].strip()
            if path.startswith("/") and path not in found:
                found.append(path)
    return found


def _bind(source: str, target: Path, read_only: bool = True) -> None:
    from ocihook.linux import syscalls

    if Path(source).is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    syscalls.mount(source, str(target), None, syscalls.MS_BIND)
    if read_only:
        flags = syscalls.MS_BIND | syscalls.MS_REMOUNT | syscalls.MS_RDONLY | syscalls.MS_NOSUID
        syscalls.mount(None, str(target), None, flags)


def make_chroot(plan, root: Path, glibc: list[str], control_only: bool, extra: list[str]) -> None:
    """The plan applied into `root` (in this process's private mount namespace), with the
    host binaries `extra` (the stand-in's probe) at their own paths."""
    from ocihook.linux import syscalls

    syscalls.mount("tmpfs", str(root), "tmpfs", 0, "mode=0755")
    for mount in plan.mounts:
        if mount.kind in ("library", "binary"):
            _bind(mount.host_path, root / mount.target.lstrip("/"))
    for link in plan.links:
        path = root / link.target.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link.points_to, path)
    for binary in extra:
        _bind(binary, root / binary.lstrip("/"))
    for library in glibc:  # the loader at its own path (it is written into every ELF), the
        # libraries where the loader looks without a cache: /usr/lib64 (LD_LIBRARY_PATH too)
        real = os.path.realpath(library)
        if "/ld-linux" in library:
            _bind(real, root / library.lstrip("/"))
        else:
            _bind(real, root / "usr/lib64" / os.path.basename(library))
    (root / "dev").mkdir(exist_ok=True)
    syscalls.mount("tmpfs", str(root / "dev"), "tmpfs", syscalls.MS_NOSUID, "mode=0755")
    for node in plan.devices:
        if control_only and node.index is not None:
            continue
        path = root / node.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        kind = 0o020000 if node.type == "c" else 0o060000
        os.mknod(path, kind | node.mode, os.makedev(node.major, node.minor))
        os.chmod(path, node.mode)
    (root / "proc").mkdir()
    syscalls.mount("proc", str(root / "proc"), "proc", syscalls.MS_NOSUID | syscalls.MS_NODEV, "")
    params = root / "proc/driver/nvidia/params"
    if params.exists():  # as libnvidia-container does: the driver must not make nodes itself
        masked = root / "dev/.params"
        text = params.read_text().replace("ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0")
        masked.write_text(text)
        _bind(str(masked), params)
    _bind("/sys", root / "sys")
    (root / "tmp").mkdir()


def in_chroot(
    plan, probe: list[str], glibc: list[str], control_only: bool, extra: list[str]
) -> str:
    """Run `probe` as nobody in a chroot of `plan`, in a forked child's private mount
    namespace (gone when it exits); its output (or the error)."""
    from ocihook.linux import syscalls

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            syscalls.unshare(syscalls.CLONE_NEWNS)
            syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
            root = Path(tempfile.mkdtemp(prefix="ocihook-gpu-check-"))
            make_chroot(plan, root, glibc, control_only, extra)
            child = os.fork()
            if child == 0:
                os.dup2(write_end, 1)
                os.dup2(write_end, 2)
                os.chroot(root)
                os.chdir("/")
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/usr/lib64"}
                os.execve(probe[0], probe, env)
            _, status = os.waitpid(child, 0)
            os.write(write_end, f"\n[exit {os.waitstatus_to_exitcode(status)}]\n".encode())
            code = 0
        except BaseException:  # noqa: BLE001 - reported through the pipe
            os.write(write_end, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        output = pipe.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return output


def uuids_listed(output: str) -> set[str]:
    return set(re.findall(r"UUID: ((?:GPU|MIG)-[0-9a-f-]+)", output))


def apply_step(checks: Checks, config: dict, forms: list, smi: str | None, stand_in: bool) -> None:
    chosen = [f for f in forms if f[0].startswith(("UUID of", "MIG "))][:4] or forms[:1]
    plan = build_plan(config, "all")
    libraries = [m.host_path for m in plan.mounts if "libnvidia-ml.so" in m.host_path]
    if stand_in:  # the host's find, with its glibc: the chroot's nodes, not a driver's answer
        finder = shutil.which("find") or "/usr/bin/find"
        probe, extra = [finder, "/dev", "-type", "c"], [finder]
        glibc = needed_libraries([finder])
    else:
        probe, extra = ["/usr/bin/nvidia-smi", "-L"], []
        glibc = needed_libraries([shutil.which(smi) or smi, *libraries[:1]])
    for number, (label, request, uuids) in enumerate(chosen):
        plan = build_plan(config, request)
        output = in_chroot(plan, probe, glibc, False, extra)
        checks.save(f"apply-{number:02d}.txt", f"request {request}\n{output}")
        if stand_in:
            seen = {line for line in output.splitlines() if line.startswith("/dev/")}
            wanted = {d.path for d in plan.devices}
            detail = f"{sorted(seen)}" if seen else output[-300:]
            checks.check(f"apply {label} (stand-in: the chroot's nodes)", seen == wanted, detail)
            continue
        listed = uuids_listed(output)
        detail = f"lists {sorted(listed)}" if listed else output.strip()[-300:]
        checks.check(f"apply {label}: nvidia-smi -L in the chroot", listed == uuids, detail)
    if not stand_in:
        plan = build_plan(config, chosen[0][1])
        output = in_chroot(plan, probe, glibc, True, extra)
        checks.save("apply-control-only.txt", output)
        listed = uuids_listed(output)
        detail = output.strip()[-200:]
        checks.check("apply control nodes only: nvidia-smi -L lists no GPU", not listed, detail)


# -- main ------------------------------------------------------------------------------------


def load_config(path: Path) -> dict:
    from ocihook.config.compiled import compile_config

    return compile_config(str(path))[0]


def write_config(out: Path) -> Path:
    """The shipped nvidia profile against this host's root, state under `out`."""
    import yaml

    config = out / "config.yaml"
    settings = {
        "profile": "nvidia",
        "profile_dirs": [str(REPO / "packaging/profiles")],
        "source_root": "/",
        "device_root": "/",
        "state_dir": str(out / "state"),
        "log": {"target": str(out / "ocihook.log"), "debug": True},
    }
    config.write_text(yaml.safe_dump(settings))
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-check-out"))
    parser.add_argument("--config", type=Path, help="default: the nvidia profile against /")
    parser.add_argument("--smi", default="nvidia-smi")
    parser.add_argument("--stand-in", type=Path, metavar="TRUTH_JSON", help="tests only")
    parser.add_argument("--steps", default="facts,nvml,plans,apply")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    checks = Checks(args.out)
    config_path = args.config or write_config(args.out)
    config = load_config(config_path)
    steps = args.steps.split(",")
    if args.stand_in:
        truth = json.loads(args.stand_in.read_text())
        smi = None
    else:
        truth = smi_truth(args.smi)
        smi = args.smi
    if "facts" in steps:
        facts(checks, truth, smi)
    if "nvml" in steps:
        nvml_step(checks, config, truth)
    forms: list = []
    if "plans" in steps or "apply" in steps:
        forms = plans_step(checks, config, truth)
    if "apply" in steps:
        apply_step(checks, config, forms, smi, bool(args.stand_in))
    print(
        f"{checks.passed} passed, {len(checks.failed)} failed"
        + (f": {', '.join(checks.failed)}" if checks.failed else "")
    )
    return 1 if checks.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
