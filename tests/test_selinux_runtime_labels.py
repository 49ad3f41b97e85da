"""Run-time labels in a real podman + runc container.

Stand-in named here: no SELinux LSM runs on this machine, so podman puts no
linux.mountLabel in config.json; hooks.d points at tests/support/hook_with_label.py, which
hands the real hook a copy of config.json with the label an SELinux host's podman sets.
The labels themselves are real `security.selinux` xattrs, read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ocihook.selinux.label import get_label
from ocihook.selinux.relabel import relabel
from tests.conftest import base_config
from tests.support import podman, synthetic

WRAPPER = Path(__file__).parent / "support/hook_with_label.py"
MOUNT_LABEL = "system_u:object_r:container_file_t:s0:c12,c34"
SHARED = "system_u:object_r:container_ro_file_t:s0"


def _label_hooks_dir(hook_setup) -> Path:
    """hooks.d pointing at the wrapper, which runs the real hook with the mount label."""
    hooks_dir = podman.write_hooks_dir(
        hook_setup.dir / "label-hooks.d",
        Path(sys.executable),
        hook_setup.config,
        hook_setup.cache_dir,
    )
    document = json.loads((hooks_dir / "ocihook.json").read_text())
    document["hook"]["args"] = [
        "python3",
        str(WRAPPER),
        str(hook_setup.hook),
        MOUNT_LABEL,
        *document["hook"]["args"][1:],
    ]
    (hooks_dir / "ocihook.json").write_text(json.dumps(document))
    return hooks_dir


def test_created_files_links_and_nodes_carry_the_mount_label(
    hook_setup, synth_root, tmp_path, image_busybox
):
    driver = synthetic.build_driver(tmp_path / "driver")
    relabel([str(driver)])
    hook_setup.write_config(
        **base_config(
            hook_setup.dir,
            driver,
            source_root=str(driver),
            device_root=str(driver),
            selinux={"mode": "enabled"},
        )
    )
    name = podman.unique_name("ocihook-label-test")
    result = podman.run(
        image_busybox,
        ["/bin/sleep", "60"],
        hooks_dir=_label_hooks_dir(hook_setup),
        devices="0",
        extra=["-d", "--name", name],
    )
    try:
        assert result.returncode == 0, result.stderr
        pid = subprocess.run(
            ["podman", "inspect", "-f", "{{.State.Pid}}", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        root = Path(f"/proc/{pid}/root")
        record = json.loads(hook_setup.records()[0].read_text())
        assert record["mount_label"] == MOUNT_LABEL
        assert record["file_label"] == MOUNT_LABEL
        created = [
            "/usr/lib",
            "/dev/synth0",
            "/dev/synthctl",
            "/usr/lib/libsynth.so.1",
            "/lib",
            "/lib/firmware",
            "/lib/firmware/synth/1.2.3",
        ]
        for path in created:
            assert get_label(str(root) + path) == MOUNT_LABEL, path
        assert os.path.islink(str(root) + "/usr/lib/libsynth.so.1")
        # Bind-mounted driver files keep the shared label of their source.
        assert get_label(str(root) + "/usr/lib/libsynth.so.1.2.3", True) == SHARED
        assert all(m["label"] == SHARED for m in record["mounts"])
        _audit_explains_denials_of_this_container(hook_setup, record, driver, tmp_path)
    finally:
        podman.remove(name)


def _audit_explains_denials_of_this_container(hook_setup, record, driver, tmp_path):
    """`ocihook audit` on AVC lines written for this real container's files and MCS level."""
    library = next(m for m in record["mounts"] if m["target"].endswith("libsynth.so.1.2.3"))
    scontext = "system_u:system_r:container_t:s0:c12,c34"
    log = tmp_path / "audit.log"
    when = record["created_at"]  # while the container ran: records outlive it, audit checks
    log.write_text(
        f"type=AVC msg=audit({when + 0.1:.3f}:501): avc:  denied  {{ map }} for  pid=4242 "
        f'comm="synth-smi" path="{library["target"]}" dev="overlay" ino={library["ino"]} '
        f"scontext={scontext} tcontext=system_u:object_r:container_file_t:s0:c5,c6 "
        "tclass=file permissive=0\n"
        f"type=AVC msg=audit({when + 0.2:.3f}:502): avc:  denied  {{ read write }} for  pid=4242 "
        'comm="synth-smi" path="/dev/synth0" dev="tmpfs" ino=7 '
        f"scontext={scontext} tcontext=system_u:object_r:device_t:s0 tclass=chr_file "
        "permissive=0\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ocihook.cli.main",
            "audit",
            "--json",
            "--state-dir",
            str(hook_setup.state_dir),
            str(log),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1, result.stderr
    findings = {f["serial"]: f for f in json.loads(result.stdout)["findings"]}
    lib, dev = findings[501], findings[502]
    assert lib["container"] == record["id"] and dev["container"] == record["id"]
    assert lib["injected"]["target"] == library["target"]
    assert lib["cause"] == "mcs-mismatch"
    assert lib["fixes"] == [f"ocihook selinux relabel {driver}"]
    assert dev["cause"] == "device-type"
    assert dev["fixes"][0] == "semodule -i /usr/share/selinux/packages/ocihook.pp"


def test_unlabelled_source_is_refused_with_the_fix(hook_setup, synth_root, image_busybox):
    hook_setup.write_config(**base_config(hook_setup.dir, synth_root, selinux={"mode": "enabled"}))
    result = podman.run(
        image_busybox, ["/bin/true"], hooks_dir=_label_hooks_dir(hook_setup), devices="0"
    )
    assert result.returncode != 0
    assert "ocihook selinux relabel" in result.stderr, result.stderr
    assert str(synth_root) in result.stderr
