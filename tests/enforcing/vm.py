#!/usr/bin/env python3
"""make test-enforcing: boot Debian 12 guests with SELinux enforcing and run the checks in them,
and the today's-stack guest.

The host side. Three guests, one boot each:

- refpolicy: Debian's policy with refpolicy's `container` module; the product installed with
  `make install`, the module built in the guest against Debian's headers.
- fedora: Fedora's targeted policy 38.1 (the base of RHEL 9.2 and later) with container-selinux
  2.229.0, built here from ../shared/tools/sources (build-fedora-targeted.sh, cached under
  build/vm/fedora-policy-<hash>); the product installed from its RPMs with `rpm`, built here
  with RHEL's macros (the policy's rpm.macros, systemd's %tmpfiles_create) and the module
  built against that policy's devel headers, as %build does on RHEL. Skipped, with that
  reason, where the shared sources are absent.
- today: Debian's newest runtimes (sid: podman 5.8, crun 1.28, runc 1.3, containerd 2.1,
  systemd 262; tests/enforcing/today-image.sh, cached under build/vm/today-sid-<hash>), no
  SELinux; the product installed with `make install`; the checks of today_checks.py (devices
  through reloads and updates on every route and runtime, check's claims against them, CDI
  with podman and containerd's CRI). Needs ../shared/tools/crio/crictl (containerd's CRI).
- trixie: the same checks on Debian 13 (podman 5.4.2, crun 1.21, runc 1.1.15, systemd 257:
  RHEL 9.6 and 10.0's generation, crun before 1.23), but containerd's (1.7 there).

Both images come from one Debian tree (tests/enforcing/image.sh, cached under
build/vm/<hash of the recipe>). The worktree goes to the guest on a raw disk (a tar), the
guest's own kernel boots under QEMU (KVM when it works here, else TCG), and the results come
back on another raw disk (a tar). Results land in build/enforcing/<policy>/ (summary.json,
audit.log, guest.log, console.log, per-check evidence) and build/enforcing/summary.json (every
check per policy and runtime). Exit 0 only when every check of every policy passed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BUILD = REPO / "build"
RESULTS = BUILD / "enforcing"
SOURCES = REPO.parent / "shared" / "tools" / "sources"
FEDORA_RECIPE = SOURCES / "build-fedora-targeted.sh"
FEDORA_DIST = SOURCES / "selinux-policy-38.1-dist.tar.gz"
FEDORA_POLICY_VERSION = "38.1-1"
POLICIES = ("refpolicy", "fedora", "today", "trixie")
STACK_GUESTS = {"today": "sid", "trixie": "trixie"}  # guest -> today-image.sh's suite
RUNTIMES = ("runc", "crun")
ROOTFS = {
    "refpolicy": "rootfs.img",
    "fedora": "rootfs-fedora.img",
    "today": "rootfs-today.img",
    "trixie": "rootfs-today.img",
}
CMDLINE = (
    "root=/dev/vda rw console=ttyS0 security=selinux selinux=1 enforcing=1 "
    "audit=1 audit_backlog_limit=8192 systemd.show_status=1 panic=-1"
)
TODAY_CMDLINE = "root=/dev/vda rw console=ttyS0 systemd.show_status=1 panic=-1"
# sid's kernel (7.x) under TCG with two vCPUs oopses at boot: a static key re-patched (int3)
# while the other vCPU runs the site (seen here in devcgroup_check_permission); one vCPU.
VCPUS = {"refpolicy": "2", "fedora": "2", "today": "1", "trixie": "1"}
CRICTL = REPO.parent / "shared" / "tools" / "crio" / "crictl"
KVM_PROBE_SECONDS = 25
OUT_DISK_BYTES = 256 << 20


def log(message: str) -> None:
    print(f"test-enforcing: {message}", flush=True)


def digest_files(paths: list[Path], base: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        if path.is_file():
            digest.update(path.relative_to(base).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def fedora_missing() -> str | None:
    """Why the Fedora policy cannot be built here, or None."""
    needed = [
        FEDORA_RECIPE,
        FEDORA_DIST,
        SOURCES / "selinux-policy-38.1.tar.gz",
        SOURCES / "container-selinux-2.193.0.tar.gz",
        SOURCES / "container-selinux-2.229.0.tar.gz",
    ]
    absent = [p.name for p in needed if not p.is_file()]
    return f"{SOURCES} lacks {', '.join(absent)}" if absent else None


def fedora_policy_dir() -> Path:
    return BUILD / "vm" / f"fedora-policy-{digest_files(sorted(SOURCES.iterdir()), SOURCES)}"


def image_key(fedora: bool) -> str:
    """Hash of the image recipe (image.sh and image/), and of the Fedora policy's sources
    when the images include the Fedora one."""
    key = digest_files([HERE / "image.sh", *sorted((HERE / "image").rglob("*"))], HERE)
    return f"{key}-{fedora_policy_dir().name.rsplit('-', 1)[1]}" if fedora else key


def start_fedora_policy() -> tuple[Path, subprocess.Popen | None]:
    """The Fedora policy's root (cached), or the process building it into that root."""
    policy = fedora_policy_dir()
    if (policy / "done").exists():
        log(f"Fedora policy {policy} (cached)")
        return policy, None
    shutil.rmtree(policy, ignore_errors=True)
    policy.mkdir(parents=True)
    log(f"building Fedora's targeted policy 38.1 + container-selinux into {policy} (minutes)")
    out = open(policy / "build.log", "w")  # noqa: SIM115 (closed with the process)
    process = subprocess.Popen(
        ["bash", str(FEDORA_RECIPE), str(policy / "root"), str(policy / "work")],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    return policy, process


def finish_fedora_policy(policy: Path, process: subprocess.Popen | None) -> None:
    if process is not None:
        started = time.monotonic()
        if process.wait() != 0:
            sys.exit(f"test-enforcing: the Fedora policy build failed, see {policy / 'build.log'}")
        shutil.rmtree(policy / "work", ignore_errors=True)
        (policy / "done").write_text("")
        log(f"Fedora policy built ({time.monotonic() - started:.0f}s after the base image)")


def stage(log_file: Path, *args: str) -> None:
    with open(log_file, "a") as out:
        done = subprocess.run([str(HERE / "image.sh"), *args], stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        sys.exit(f"test-enforcing: image.sh {args[0]} failed, see {log_file}")


def ensure_images(fedora: bool) -> tuple[Path, Path | None]:
    """The image dir (rootfs.img, and rootfs-fedora.img when `fedora`) and the Fedora
    policy's root (None without `fedora`)."""
    image = BUILD / "vm" / image_key(fedora)
    policy, building = start_fedora_policy() if fedora else (None, None)
    if all(
        (image / ROOTFS[p]).exists() for p in ("refpolicy", "fedora") if fedora or p == "refpolicy"
    ):
        log(f"images {image} (cached)")
        if policy is not None:
            finish_fedora_policy(policy, building)
        return image, policy
    image.parent.mkdir(parents=True, exist_ok=True)
    build_log = BUILD / "vm" / "image-build.log"
    build_log.write_text("")
    log(f"building the guest images {image} (mmdebstrap, a few minutes; log {build_log})")
    started = time.monotonic()
    work = Path(f"{image}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    root = work / "root"
    stage(build_log, "base", str(root))
    stage(build_log, "refpolicy", str(root), str(work))
    if policy is not None:
        finish_fedora_policy(policy, building)
        stage(build_log, "fedora", str(root), str(policy / "root"), str(work))
    shutil.rmtree(root)
    shutil.rmtree(image, ignore_errors=True)
    work.rename(image)
    log(f"images built in {time.monotonic() - started:.0f}s")
    # Older images and policies (other recipes) are kept only until new ones are built.
    keep = {image.name} | ({policy.name} if policy else set())
    for old in (BUILD / "vm").iterdir():
        if old.is_dir() and old.name not in keep and not old.name.startswith("today-"):
            shutil.rmtree(old, ignore_errors=True)
    return image, policy


def today_key(suite: str) -> str:
    files = [HERE / "today-image.sh", HERE / "today-pins.txt", *sorted((HERE / "today").rglob("*"))]
    files += [HERE / "image/ocihook-guest-run", HERE / "image/ocihook-guest.service"]
    return f"today-{suite}-{digest_files(files, HERE)}"


def ensure_today_image(suite: str) -> Path:
    """A runtime stack's image dir (vmlinuz, initrd.img, rootfs-today.img, versions.txt),
    from Debian `suite` (today-image.sh)."""
    image = BUILD / "vm" / today_key(suite)
    if (image / "rootfs-today.img").exists():
        log(f"{suite} stack image {image} (cached)")
        return image
    if not CRICTL.exists():
        sys.exit(f"test-enforcing: the today's-stack guest needs {CRICTL} (containerd's CRI)")
    image.parent.mkdir(parents=True, exist_ok=True)
    build_log = BUILD / "vm" / f"today-{suite}-build.log"
    log(f"building the {suite} stack image {image} (mmdebstrap; log {build_log})")
    started = time.monotonic()
    work = Path(f"{image}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    with open(build_log, "w") as out:
        done = subprocess.run(
            [
                "sh",
                str(HERE / "today-image.sh"),
                str(work / "root"),
                str(work / "out"),
                str(CRICTL),
                suite,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        sys.exit(f"test-enforcing: today-image.sh failed, see {build_log}")
    shutil.rmtree(image, ignore_errors=True)
    (work / "out").rename(image)
    shutil.rmtree(work, ignore_errors=True)
    log(f"{suite} stack image built in {time.monotonic() - started:.0f}s: "
        f"{(image / 'versions.txt').read_text().splitlines()[0]}")  # fmt: skip
    for old in (BUILD / "vm").iterdir():
        if old.is_dir() and old.name.startswith(f"today-{suite}-") and old.name != image.name:
            shutil.rmtree(old, ignore_errors=True)
    return image


def rhel_macros(directory: Path) -> Path:
    """The macros RHEL's build root has for this spec: selinux-policy-devel's
    macros.selinux-policy (the dist tarball's rpm.macros, with the two values its spec fills
    in) and systemd-rpm-macros' tmpfiles ones (tests/enforcing/macros.systemd)."""
    with tarfile.open(FEDORA_DIST) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/rpm.macros"))
        source = tar.extractfile(member)
        assert source is not None
        selinux = source.read().decode()
    selinux = selinux.replace("SELINUXPOLICYVERSION", FEDORA_POLICY_VERSION)
    selinux = selinux.replace("SELINUXSTOREPATH", "/var/lib/selinux")
    macros = directory / "macros.rhel"
    macros.write_text(selinux + "\n" + (HERE / "macros.systemd").read_text())
    return macros


def fedora_rpms(policy: Path) -> list[Path]:
    """ocihook's RPMs for the Fedora guest: `make rpm` with RHEL's macros, %{rhel} 9 and the
    module built with the Fedora policy's devel Makefile (NAME=targeted, as on RHEL)."""
    work = BUILD / "enforcing-rpm"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    topdir = work / "rpmbuild"  # make rpm empties it first
    macros = rhel_macros(work)
    devel = policy / "root/usr/share/selinux"
    make_flags = f"DEVEL_MAKEFILE={devel}/devel/Makefile SHAREDIR={devel} NAME=targeted"
    args = (
        f"--load {macros} --define 'rhel 9' --define 'dist .el9' "
        f"--define 'ocihook_selinux_make_flags {make_flags}'"
    )
    with open(work / "build.log", "w") as out:
        done = subprocess.run(
            ["make", "-C", str(REPO), "rpm", f"RPM_TOPDIR={topdir}", f"RPMBUILD_ARGS={args}"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        sys.exit(f"test-enforcing: make rpm for the Fedora guest failed, see {work}/build.log")
    rpms = sorted((topdir / "RPMS").rglob("*.rpm"))
    log(f"RPMs for the Fedora guest: {', '.join(p.name for p in rpms)}")
    return rpms


def input_tar(path: Path, options: dict, rpms: list[Path]) -> None:
    """The worktree as git sees it (tracked and untracked, not ignored files), the options
    and the RPMs (enforcing-rpms/)."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name in names:
            if name and (REPO / name.decode()).exists():
                tar.add(REPO / name.decode(), arcname=name.decode(), recursive=False)
        for rpm in rpms:
            tar.add(rpm, arcname=f"enforcing-rpms/{rpm.name}")
        data = json.dumps(options).encode()
        info = tarfile.TarInfo("enforcing-options.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    size = path.stat().st_size
    with open(path, "ab") as f:  # whole sectors for the raw disk
        f.write(b"\0" * ((-size) % 512 + 10240))


def qemu_command(
    image: Path, policy: str, accel: str, in_tar: Path, out_disk: Path, console: Path
) -> list:
    cpu = ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg,thread=multi"]
    cpu += ["-cpu", "max"] if accel != "kvm" else []
    rootfs = ROOTFS[policy]
    return [
        "qemu-system-x86_64",
        *cpu,
        "-machine",
        "q35",
        "-m",
        "3072",
        "-smp",
        VCPUS[policy],
        "-display",
        "none",
        "-monitor",
        "none",
        "-serial",
        f"file:{console}",
        "-no-reboot",
        "-nic",
        "none",
        "-kernel",
        str(image / "vmlinuz"),
        "-initrd",
        str(image / "initrd.img"),
        "-append",
        TODAY_CMDLINE if policy in STACK_GUESTS else CMDLINE,
        "-drive",
        f"file={image / rootfs},format=raw,if=virtio,snapshot=on",
        "-drive",
        f"file={in_tar},format=raw,if=virtio,readonly=on",
        "-drive",
        f"file={out_disk},format=raw,if=virtio",
    ]


def boot(image: Path, policy: str, in_tar: Path, out_disk: Path, console: Path, timeout: int):
    """Boot the guest until it powers off; return the accelerator used."""
    accels = ["kvm", "tcg"] if os.access("/dev/kvm", os.R_OK | os.W_OK) else ["tcg"]
    for accel in accels:
        console.unlink(missing_ok=True)
        started = time.monotonic()
        proc = subprocess.Popen(
            qemu_command(image, policy, accel, in_tar, out_disk, console),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        if accel == "kvm":
            # Nested KVM here cannot boot a stock kernel: qemu fails at once, or the guest
            # hangs before printing anything. Give it a short while to print the banner.
            while time.monotonic() - started < KVM_PROBE_SECONDS and proc.poll() is None:
                if console.exists() and b"Linux version" in console.read_bytes():
                    break
                time.sleep(1)
            if proc.poll() is not None or not (
                console.exists() and b"Linux version" in console.read_bytes()
            ):
                if proc.poll() is None:
                    proc.kill()
                out = proc.communicate()[0].decode(errors="replace").strip().splitlines()
                log(f"KVM does not boot this kernel here ({(out or ['no output'])[-1]}); TCG")
                continue
        log(f"guest booting ({accel}); console: {console}")
        try:
            out = proc.communicate(timeout=max(60, timeout - (time.monotonic() - started)))[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            sys.exit(f"test-enforcing: the guest did not finish in {timeout}s; see {console}")
        if proc.returncode != 0:
            sys.exit(f"test-enforcing: qemu failed: {out.decode(errors='replace')[-500:]}")
        log(f"guest done in {time.monotonic() - started:.0f}s ({accel})")
        return accel
    raise AssertionError("unreachable")


def extract_results(out_disk: Path, results: Path) -> None:
    """The guest's result tar into `results`: plain files and directories, relative paths."""
    with tarfile.open(out_disk) as tar:
        for member in tar.getmembers():
            name = Path(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise ValueError(f"unsafe path in the results: {member.name}")
            target = results / name
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                target.write_bytes(source.read())


def run_guest(
    policy: str, image: Path, options: dict, rpms: list[Path], timeout: int
) -> tuple[dict, str]:
    """One guest boot with `policy`: its summary (or a failure summary) and the accelerator."""
    results = RESULTS / policy
    results.mkdir(parents=True)
    in_tar = results / "in.tar"
    out_disk = results / "out.raw"
    input_tar(in_tar, {**options, "policy": policy}, rpms)
    with open(out_disk, "wb") as f:
        f.truncate(OUT_DISK_BYTES)
    accel = boot(image, policy, in_tar, out_disk, results / "console.log", timeout)
    try:
        extract_results(out_disk, results)
    except (tarfile.TarError, ValueError) as error:
        sys.exit(f"test-enforcing: no results from the {policy} guest ({error}); see console.log")
    in_tar.unlink()
    out_disk.unlink()
    summary_path = results / "summary.json"
    if not summary_path.exists():
        guest_log = results / "guest.log"
        print(guest_log.read_text()[-3000:] if guest_log.exists() else "")
        sys.exit(f"test-enforcing: the {policy} guest wrote no summary; see {results}")
    return json.loads(summary_path.read_text()), accel


def check_label(policy: str, check: dict) -> str:
    runtime = check.get("runtime")
    return f"{policy}{'/' + runtime if runtime else ''} {check['name']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", default="all", help="comma-separated check names, or all")
    parser.add_argument(
        "--policies", default="all", help=f"comma-separated of {', '.join(POLICIES)}, or all"
    )
    parser.add_argument(
        "--runtimes",
        default="all",
        help=f"OCI runtimes for the runtime checks: comma-separated of {', '.join(RUNTIMES)}",
    )
    parser.add_argument("--timeout", type=int, default=1800, help="seconds for each guest run")
    args = parser.parse_args()
    policies = POLICIES if args.policies == "all" else tuple(args.policies.split(","))
    runtimes = RUNTIMES if args.runtimes == "all" else tuple(args.runtimes.split(","))
    unknown = sorted(set(policies) - set(POLICIES)) + sorted(set(runtimes) - set(RUNTIMES))
    if unknown:
        parser.error(f"unknown policy or runtime: {', '.join(unknown)}")
    started = time.monotonic()
    skipped = {}
    if "fedora" in policies and (why := fedora_missing()):
        skipped["fedora"] = f"skipped: {why}"
        log(f"fedora policy {skipped['fedora']}")
        policies = tuple(p for p in policies if p != "fedora")
    enforcing = [p for p in policies if p not in STACK_GUESTS]
    image, fedora_policy = ensure_images("fedora" in policies) if enforcing else (None, None)
    stack_images = {p: ensure_today_image(STACK_GUESTS[p]) for p in policies if p in STACK_GUESTS}
    rpms = fedora_rpms(fedora_policy) if fedora_policy is not None else []
    shutil.rmtree(RESULTS, ignore_errors=True)
    RESULTS.mkdir(parents=True)
    options = {"checks": args.checks, "runtimes": list(runtimes)}
    combined: dict = {"policies": {}, "skipped": skipped}
    failed = []
    for policy in policies:
        summary, accel = run_guest(
            policy,
            stack_images.get(policy, image),
            options,
            rpms if policy == "fedora" else [],
            args.timeout,
        )
        summary["host"] = {"accel": accel}
        (RESULTS / policy / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        combined["policies"][policy] = summary
        for check in summary["checks"]:
            mark = "ok  " if check["ok"] else "FAIL"
            log(f"{mark} {check_label(policy, check)}: {check['detail']}")
            if not check["ok"]:
                failed.append(check_label(policy, check))
        if not summary["checks"]:
            failed.append(f"{policy}: no checks ran")
        if policy in STACK_GUESTS:
            versions = summary.get("versions", {})
            shutil.copy(stack_images[policy] / "versions.txt", RESULTS / policy / "versions.txt")
            log(
                f"{policy}: {sum(c['ok'] for c in summary['checks'])}/{len(summary['checks'])} "
                f"checks passed; podman {versions.get('podman')}, crun {versions.get('crun')}, "
                f"runc {versions.get('runc')}, containerd {versions.get('containerd')}, systemd "
                f"{versions.get('systemd')}, kernel {versions.get('kernel')}; {accel}"
            )
            continue
        log(
            f"{policy}: {sum(c['ok'] for c in summary['checks'])}/{len(summary['checks'])} "
            f"checks passed; AVC {summary['avc']}, SELINUX_ERR {summary['selinux_err']} "
            "(outside the broken-on-purpose check; "
            f"{summary.get('stand_in_denials', 0)} module requests for the fake hosts' "
            "driverless majors set apart, see vendor-devices.denials; "
            f"{summary.get('boot_denials', 0)} at boot, see boot.denials); {accel}"
        )
    combined["seconds"] = round(time.monotonic() - started)
    (RESULTS / "summary.json").write_text(json.dumps(combined, indent=2) + "\n")
    for policy, why in skipped.items():
        log(f"{policy}: {why}")
    log(
        f"{'FAILED: ' + ', '.join(failed) if failed else 'all checks passed'}; "
        f"policies {', '.join(policies) or 'none'}, runtimes {', '.join(runtimes)}; "
        f"{combined['seconds']}s; results in {RESULTS}"
    )
    return 1 if failed or not policies else 0


if __name__ == "__main__":
    raise SystemExit(main())
