"""The classic mount API (kernels before 5.12, e.g. RHEL 8), forced with `mount_api: classic`.

This kernel has the new mount API, so the config switch makes the hook take the classic
path for real: sources opened in the container's mount namespace, mount(2) MS_BIND from
/proc/self/fd, then a read-only remount.
"""

from __future__ import annotations

from tests.conftest import base_config
from tests.support import synthetic
from tests.test_e2e_userns import USERNS


def classic(hook_setup, synth_root):
    hook_setup.write_config(**base_config(hook_setup.dir, synth_root, mount_api="classic"))


def test_classic_mounts_inject_a_working_driver(hook_setup, synth_root, image_rhel):
    classic(hook_setup, synth_root)
    script = (
        "/usr/bin/synth-smi /dev/synth0 && grep ' /usr/lib64/libsynth.so.1.2.3 ' "
        "/proc/self/mountinfo && grep ' /usr/lib/firmware/synth/1.2.3/gsp_0.bin ' "
        "/proc/self/mountinfo"
    )
    result = hook_setup.run(image_rhel, ["/bin/sh", "-c", script], devices="0")
    assert result.returncode == 0, result.stderr
    assert "loaded from /usr/lib64/libsynth.so.1" in result.stdout
    assert synthetic.opened("synth0") in result.stdout
    library, firmware = [line.split()[5].split(",") for line in result.stdout.splitlines()[-2:]]
    assert {"ro", "nosuid", "nodev"} <= set(library) and "noexec" not in library
    assert {"ro", "nosuid", "nodev", "noexec"} <= set(firmware)
    assert "classic" not in result.stderr


def test_classic_mounts_in_a_user_namespace(hook_setup, synth_root, image_rhel):
    classic(hook_setup, synth_root)
    result = hook_setup.run(
        image_rhel, ["/usr/bin/synth-smi", "/dev/synth0"], devices="0", extra=USERNS
    )
    assert result.returncode == 0, result.stderr
    assert synthetic.opened("synth0") in result.stdout
