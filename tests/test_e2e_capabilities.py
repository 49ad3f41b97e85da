"""Real podman + runc containers: a non-root user opens every device, capabilities select
what is injected, a profile directory is mounted read-write, the kernel module's version
selects the files. The synthetic driver stands in for a GPU driver (its device nodes are
real char devices of this machine)."""

from __future__ import annotations

import os

import pytest
import yaml

from ocihook.errors import OcihookError
from tests.conftest import PROFILES, base_config
from tests.support import synthetic

CAPS = "ocihook.io/capabilities"


def _profile(**extra) -> dict:
    profile = yaml.safe_load((PROFILES / "synthetic.yaml").read_text())
    profile.update(extra)
    return profile


def test_non_root_user_opens_every_device(hook_setup, image_busybox):
    """runc runs hooks with the runtime's umask (0022 here): nodes must still get 0666."""
    old = os.umask(0o022)
    try:
        result = hook_setup.run(
            image_busybox,
            [
                "/bin/sh",
                "-c",
                "id -u; for d in /dev/synth*; do exec 3<>$d && echo OPENED $d; done; ls -l /dev",
            ],
            devices="all",
            extra=["--user", "1000:1000"],
        )
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "1000"
    for node in ("synth0", "synth1", "synth2", "synthctl", "synth-uvm"):
        assert f"OPENED /dev/{node}" in result.stdout, result.stdout + result.stderr
        assert "Permission denied" not in result.stderr


def test_capabilities_annotation_selects_parts(hook_setup, image_busybox, tmp_path):
    root = synthetic.build_driver(tmp_path / "drv")
    mps = root / "run/synth-mps"
    mps.mkdir(parents=True)
    mps.chmod(0o777)
    (root / "usr/share/synth").mkdir(parents=True)
    (root / "usr/share/synth/table.bin").write_bytes(b"data")
    profile = _profile(
        libraries=[],
        binaries=[],
        default_capabilities=["base"],
        capabilities={
            "base": {"libraries": ["libsynth.so.*"]},
            "tools": {
                "binaries": ["synth-smi"],
                "files": [
                    {"path": "/run/synth-mps", "writable": True},
                    "/usr/share/synth",
                ],
            },
        },
    )
    hook_setup.write_config(
        **base_config(hook_setup.dir, root, profile=profile, ldconfig={"enabled": False})
    )
    check = "ls /usr/bin/synth-smi /usr/lib/*/libsynth.so.1 /usr/lib/libsynth.so.1 2>/dev/null"
    default = hook_setup.run(image_busybox, ["/bin/sh", "-c", check], devices="0")
    assert "libsynth.so.1" in default.stdout and "synth-smi" not in default.stdout
    tools = hook_setup.run(
        image_busybox,
        [
            "/bin/sh",
            "-c",
            f"{check}; echo hi > /run/synth-mps/pipe && echo WROTE; cat /usr/share/synth/table.bin;"
            " echo x > /usr/share/synth/new || echo READ-ONLY",
        ],
        devices="0",
        extra=["--annotation", f"{CAPS}=tools"],
    )
    assert tools.returncode == 0, tools.stderr
    assert "/usr/bin/synth-smi" in tools.stdout and "libsynth.so.1" not in tools.stdout
    assert "WROTE" in tools.stdout
    assert "data" in tools.stdout and "READ-ONLY" in tools.stdout  # a read-only directory
    assert "Read-only file system" in tools.stderr
    assert not (root / "usr/share/synth/new").exists()
    assert (mps / "pipe").read_text() == "hi\n"  # the host's directory, read-write
    bad = hook_setup.run(
        image_busybox, ["true"], devices="0", extra=["--annotation", f"{CAPS}=graphics"]
    )
    assert bad.returncode != 0
    assert "ocihook: annotation ocihook.io/capabilities: unknown driver capability 'graphics'" in (
        bad.stderr
    )


def test_kernel_version_selects_files_and_refuses_a_mismatch(hook_setup, image_busybox, tmp_path):
    root = synthetic.build_driver(tmp_path / "drv")
    lib = root / synthetic.MULTIARCH
    (lib / "libsynth.so.0.9.9").write_bytes((lib / f"libsynth.so.{synthetic.VERSION}").read_bytes())
    (root / "sys/module/synth").mkdir(parents=True)
    version_file = root / "sys/module/synth/version"
    version_file.write_text(f"{synthetic.VERSION}\n")
    profile = _profile(
        driver_version={"kernel": ["/sys/module/synth/version"], "library": "libsynth.so.*"}
    )
    hook_setup.write_config(**base_config(hook_setup.dir, root, profile=profile))
    ok = hook_setup.run(
        image_busybox, ["/bin/sh", "-c", "ls /usr/lib*/ /lib/firmware/synth"], devices="0"
    )
    assert ok.returncode == 0, ok.stderr
    assert f"libsynth.so.{synthetic.VERSION}" in ok.stdout and "0.9.9" not in ok.stdout
    version_file.write_text("2.0.0\n")
    refused = hook_setup.run(image_busybox, ["true"], devices="0")
    assert refused.returncode != 0
    assert (
        f"ocihook: driver 2.0.0 is loaded ({root}/sys/module/synth/version) but {root} has "
        "libsynth.so.* only of 0.9.9, 1.2.3: the driver was upgraded without reloading its "
        "kernel module; reboot (or reload it)"
    ) in refused.stderr


@pytest.mark.root
def test_writable_directory_needs_a_label_containers_can_write(tmp_path):
    """Real security.selinux xattrs (no SELinux LSM here: the labels are set and read back),
    read from the fd that is mounted: the host path is swapped for a differently labelled
    directory after the source was opened, and the check still sees the opened one."""
    from ocihook.apply.sources import SourceTree, check_source_labels
    from ocihook.plan.model import Mount
    from ocihook.records import Log

    mps = tmp_path / "mps"
    mps.mkdir()
    mount = Mount("/mps", str(mps), "/tmp/nvidia-mps", "directory", True)
    config = {"selinux": {"source_check": "error"}, "source_root": str(tmp_path)}
    log = Log("none", False)
    os.setxattr(mps, "security.selinux", b"system_u:object_r:container_ro_file_t:s0\0")
    fd = os.open(mps, os.O_PATH | os.O_DIRECTORY)
    try:
        st = os.fstat(fd)
        sources = [SourceTree(mount, fd, st.st_dev, st.st_ino)]
        with pytest.raises(OcihookError) as error:
            check_source_labels(sources, config, log)
        assert str(error.value) == (
            f"{mps} is mounted read-write but labelled system_u:object_r:container_ro_file_t:s0, "
            f"which containers cannot write; run: chcon -R -t container_file_t -l s0 {mps} (and "
            "make it persistent with semanage fcontext)"
        )
        os.setxattr(mps, "security.selinux", b"system_u:object_r:container_file_t:s0\0")
        assert check_source_labels(sources, config, log) == [
            "system_u:object_r:container_file_t:s0"
        ]
        # The host path now names another directory with a label no container may write:
        # what is mounted is the opened one, and that is what is checked.
        mps.rename(tmp_path / "mps.old")
        mps.mkdir()
        os.setxattr(mps, "security.selinux", b"system_u:object_r:etc_t:s0\0")
        assert check_source_labels(sources, config, log) == [
            "system_u:object_r:container_file_t:s0"
        ]
    finally:
        os.close(fd)


def test_compat32_libraries_go_to_the_images_32_bit_dir(hook_setup, image_debian, tmp_path):
    """Stand-in: the 32-bit libsynth is a real i386 shared object with its DT_SONAME but no
    code a program calls (binutils only: no 32-bit gcc runtime here); what is checked is
    where it lands in a Debian image and that the image's ld cache is updated for that
    dir, not that a 32-bit program loads it."""
    root = synthetic.build_driver(tmp_path / "drv")
    real = f"libsynth.so.{synthetic.VERSION}"
    i386 = root / "usr/lib/i386-linux-gnu"
    (tmp_path / "work").mkdir()
    synthetic.i386_library(i386 / real, "libsynth.so.1", tmp_path / "work")
    os.symlink(real, i386 / "libsynth.so.1")
    profile = _profile(
        libraries=[],
        binaries=[],
        library_dirs32=["/usr/lib/i386-linux-gnu"],
        default_capabilities=["base"],
        capabilities={"base": {"libraries": ["libsynth.so.*"]}, "compat32": {}},
    )
    hook_setup.write_config(**base_config(hook_setup.dir, root, profile=profile))
    script = (
        "ls /usr/lib/i386-linux-gnu/ | grep synth; "
        "grep -c /usr/lib/i386-linux-gnu/libsynth.so.1 /etc/ld.so.cache"
    )
    plain = hook_setup.run(image_debian, ["/bin/sh", "-c", script], devices="0")
    assert "libsynth" not in plain.stdout  # compat32 not asked for
    both = hook_setup.run(
        image_debian,
        ["/bin/sh", "-c", script],
        devices="0",
        # podman 4.3 splits --annotation at commas unless the pair is double-quoted (CSV)
        extra=["--annotation", f'"{CAPS}=base,compat32"'],
    )
    assert both.returncode == 0, both.stderr
    assert both.stdout.split() == ["libsynth.so.1", real, "1"]


def test_profile_mode_overrides_the_host_nodes_mode(hook_setup, image_busybox, synth_root):
    """devices.mode 0660: root in the container opens the node, user 1000 may not."""
    profile = _profile(devices={**_profile()["devices"], "mode": "0660"})
    hook_setup.write_config(**base_config(hook_setup.dir, synth_root, profile=profile))
    script = "stat -c %a /dev/synth0; exec 3<>/dev/synth0 && echo OPENED"
    as_root = hook_setup.run(image_busybox, ["/bin/sh", "-c", script], devices="0")
    assert as_root.stdout.split() == ["660", "OPENED"], as_root.stderr
    as_user = hook_setup.run(
        image_busybox, ["/bin/sh", "-c", script], devices="0", extra=["--user", "1000:1000"]
    )
    assert as_user.stdout.split() == ["660"]
    assert "Permission denied" in as_user.stderr
