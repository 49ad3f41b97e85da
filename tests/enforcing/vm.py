#!/usr/bin/env python3
"""make test-enforcing: boot a Debian 12 guest with SELinux enforcing and run the checks in it.

The host side. It builds the guest image once (tests/enforcing/image.sh, cached under
build/vm/<hash of the recipe>), hands the worktree to the guest on a raw disk (a tar), boots
the image's own kernel under QEMU (KVM when it works here, else TCG), and reads the guest's
results back from another raw disk (a tar). Results land in build/enforcing/: summary.json
(one entry per check), audit.log, guest.log, console.log. Exit 0 only when every check passed.
"""

from __future__ import annotations

import argparse
import hashlib
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
CMDLINE = (
    "root=/dev/vda rw console=ttyS0 security=selinux selinux=1 enforcing=1 "
    "audit=1 audit_backlog_limit=8192 systemd.show_status=1 panic=-1"
)
KVM_PROBE_SECONDS = 25
OUT_DISK_BYTES = 256 << 20


def log(message: str) -> None:
    print(f"test-enforcing: {message}", flush=True)


def image_key() -> str:
    """Hash of the image recipe: image.sh and everything under image/."""
    digest = hashlib.sha256()
    for path in [HERE / "image.sh", *sorted((HERE / "image").rglob("*"))]:
        if path.is_file():
            digest.update(path.relative_to(HERE).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def ensure_image() -> Path:
    image = BUILD / "vm" / image_key()
    if (image / "rootfs.img").exists():
        log(f"image {image} (cached)")
        return image
    image.parent.mkdir(parents=True, exist_ok=True)
    log(f"building the guest image {image} (mmdebstrap, a few minutes)")
    started = time.monotonic()
    with open(BUILD / "vm" / "image-build.log", "w") as out:
        done = subprocess.run(
            [str(HERE / "image.sh"), str(image)], stdout=out, stderr=subprocess.STDOUT
        )
    if done.returncode != 0:
        sys.exit(f"test-enforcing: image build failed, see {BUILD / 'vm' / 'image-build.log'}")
    log(f"image built in {time.monotonic() - started:.0f}s")
    # Older images (other recipes) are kept only until a new one is built.
    for old in (BUILD / "vm").iterdir():
        if old.is_dir() and old != image:
            shutil.rmtree(old, ignore_errors=True)
    return image


def input_tar(path: Path, checks: str) -> None:
    """The worktree as git sees it (tracked and untracked, not ignored files) plus the options."""
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
        options = json.dumps({"checks": checks}).encode()
        info = tarfile.TarInfo("enforcing-options.json")
        info.size = len(options)
        import io

        tar.addfile(info, io.BytesIO(options))
    size = path.stat().st_size
    with open(path, "ab") as f:  # whole sectors for the raw disk
        f.write(b"\0" * ((-size) % 512 + 10240))


def qemu_command(image: Path, accel: str, in_tar: Path, out_disk: Path, console: Path) -> list:
    cpu = ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg,thread=multi"]
    cpu += ["-cpu", "max"] if accel != "kvm" else []
    return [
        "qemu-system-x86_64",
        *cpu,
        "-machine",
        "q35",
        "-m",
        "3072",
        "-smp",
        "2",
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
        CMDLINE,
        "-drive",
        f"file={image / 'rootfs.img'},format=raw,if=virtio,snapshot=on",
        "-drive",
        f"file={in_tar},format=raw,if=virtio,readonly=on",
        "-drive",
        f"file={out_disk},format=raw,if=virtio",
    ]


def boot(image: Path, in_tar: Path, out_disk: Path, console: Path, timeout: int) -> str:
    """Boot the guest until it powers off; return the accelerator used."""
    accels = ["kvm", "tcg"] if os.access("/dev/kvm", os.R_OK | os.W_OK) else ["tcg"]
    for accel in accels:
        console.unlink(missing_ok=True)
        started = time.monotonic()
        proc = subprocess.Popen(
            qemu_command(image, accel, in_tar, out_disk, console),
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


def extract_results(out_disk: Path) -> None:
    """The guest's result tar into RESULTS: plain files and directories, relative paths only."""
    with tarfile.open(out_disk) as tar:
        for member in tar.getmembers():
            name = Path(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise ValueError(f"unsafe path in the results: {member.name}")
            target = RESULTS / name
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                target.write_bytes(source.read())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", default="all", help="comma-separated check names, or all")
    parser.add_argument("--timeout", type=int, default=1500, help="seconds for the guest run")
    args = parser.parse_args()
    started = time.monotonic()
    image = ensure_image()
    shutil.rmtree(RESULTS, ignore_errors=True)
    RESULTS.mkdir(parents=True)
    in_tar = RESULTS / "in.tar"
    out_disk = RESULTS / "out.raw"
    input_tar(in_tar, args.checks)
    with open(out_disk, "wb") as f:
        f.truncate(OUT_DISK_BYTES)
    accel = boot(image, in_tar, out_disk, RESULTS / "console.log", args.timeout)
    try:
        extract_results(out_disk)
    except (tarfile.TarError, ValueError) as error:
        sys.exit(f"test-enforcing: no results from the guest ({error}); see console.log")
    in_tar.unlink()
    out_disk.unlink()
    summary_path = RESULTS / "summary.json"
    if not summary_path.exists():
        print(
            (RESULTS / "guest.log").read_text()[-3000:] if (RESULTS / "guest.log").exists() else ""
        )
        sys.exit(f"test-enforcing: the guest wrote no summary; see {RESULTS}")
    summary = json.loads(summary_path.read_text())
    summary["host"] = {"accel": accel, "seconds": round(time.monotonic() - started)}
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    failed = [c for c in summary["checks"] if not c["ok"]]
    for check in summary["checks"]:
        mark = "ok  " if check["ok"] else "FAIL"
        log(f"{mark} {check['name']}: {check['detail']}")
    log(
        f"{len(summary['checks']) - len(failed)}/{len(summary['checks'])} checks passed; "
        f"AVC {summary['avc']}, SELINUX_ERR {summary['selinux_err']} "
        f"(outside the broken-on-purpose check; {summary.get('stand_in_denials', 0)} module "
        "requests for the fake hosts' driverless majors set apart, see vendor-devices.denials); "
        f"{accel}, "
        f"{time.monotonic() - started:.0f}s; results in {RESULTS}"
    )
    return 1 if failed or not summary["checks"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
