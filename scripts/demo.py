#!/usr/bin/env python3
"""make demo: a real podman container gets the synthetic driver injected by the hook and uses it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ocihook.selinux.label import selinux_enabled  # noqa: E402
from tests.support import host_devices, images, podman, synthetic  # noqa: E402

WORK = REPO / "build" / "demo"


def step(message: str) -> None:
    print(f"==> {message}", flush=True)


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    try:
        picked = synthetic.suite_devices()
    except host_devices.TooFewDevices as error:
        print(f"DEMO FAILED: {error}", file=sys.stderr)
        return 1
    nodes = ", ".join(
        f"{name} = {picked[name]}" for name in synthetic.DEVICE_NAMES + synthetic.CONTROL_NAMES
    )
    step(f"building the synthetic driver (libsynth, synth-smi; this kernel's devices: {nodes})")
    driver = synthetic.build_driver(WORK / "driver")
    if selinux_enabled():
        # As docs/selinux.md tells users: a driver tree containers share is labelled for them.
        step(f"SELinux is enabled: ocihook selinux relabel {driver}")
        relabel = [sys.executable, "-c", "from ocihook.cli.main import main; main()"]
        subprocess.run([*relabel, "selinux", "relabel", str(driver)], check=True)
    hook = podman.write_hook_executable(WORK / "ocihook-hook", sys.executable)
    config = WORK / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "profile": "synthetic",
                "profile_dirs": [str(REPO / "packaging/profiles")],
                "source_root": str(driver),
                "device_root": str(driver),
                "state_dir": str(WORK / "state"),
                "log": {"target": str(WORK / "ocihook.log"), "debug": False},
            },
            indent=2,
        )
    )
    step(f"registering the hook in {WORK / 'hooks.d'}")
    hooks_dir = podman.write_hooks_dir(WORK / "hooks.d", hook, config, WORK / "cache")
    step("importing a small glibc image of RHEL layout (busybox + glibc, no driver inside)")
    image = images.import_image(images.glibc_rootfs(WORK / "image", "rhel"), "ocihook-demo")

    step(f"podman run --annotation {podman.ANNOTATION}=all {image} synth-smi")
    with_driver = podman.run(image, ["/usr/bin/synth-smi"], hooks_dir=hooks_dir, devices="all")
    print(with_driver.stdout + with_driver.stderr, end="")
    step(f"podman run {image} (no annotation): what does it see?")
    plain = podman.run(
        image,
        [
            "/bin/sh",
            "-c",
            "ls /dev | grep synth; ls /usr/bin | grep synth; "
            'echo "synth entries: $(ls /dev /usr/bin | grep -c synth)"',
        ],
        hooks_dir=hooks_dir,
    )
    print(plain.stdout + plain.stderr, end="")

    ok = (
        with_driver.returncode == 0
        and "loaded from /usr/lib64/libsynth.so.1" in with_driver.stdout
        and all(
            f"opened /dev/{name} ({picked[name].major}:{picked[name].minor}) read-write"
            in with_driver.stdout
            for name in synthetic.DEVICE_NAMES + synthetic.CONTROL_NAMES
        )
        and "synth entries: 0" in plain.stdout
    )
    if ok:
        print(
            "\nDEMO OK: the hook injected libsynth, synth-smi and /dev/synth* into the annotated "
            "container;\n         synth-smi loaded the library through the ld cache and opened "
            "every device read-write;\n         the container without the annotation got nothing."
        )
        return 0
    print("\nDEMO FAILED: see the output above and " + str(WORK / "ocihook.log"), file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
