"""A container with a user namespace: device nodes are bind-mounted from the host, not mknod'ed.

Inside a user namespace the container's /dev is a tmpfs owned by that namespace, where
nodes made with mknod cannot be opened; the hook bind-mounts the host's nodes instead.
"""

from __future__ import annotations

import json

from tests.support import synthetic

USERNS = ["--uidmap", "0:200000:65536", "--gidmap", "0:200000:65536"]


def test_userns_container_gets_working_device_and_library(hook_setup, image_rhel):
    result = hook_setup.run(
        image_rhel,
        [
            "/bin/sh",
            "-c",
            "/usr/bin/synth-smi /dev/synth0 /dev/synthctl && "
            "grep -c ' /dev/synth0 ' /proc/self/mountinfo && "
            "stat -c '%u' /usr/lib64/libsynth.so.1",
        ],
        devices="0",
        extra=USERNS,
    )
    assert result.returncode == 0, result.stderr
    assert "loaded from /usr/lib64/libsynth.so.1" in result.stdout
    assert synthetic.opened("synth0") in result.stdout
    lines = result.stdout.strip().splitlines()
    assert lines[-2] == "1"  # /dev/synth0 is a bind mount of the host node
    assert lines[-1] == "0"  # the link the hook created belongs to the container's root
    # A user namespace in the container's config does not make the hook rootless: that is
    # decided by the hook's own process (here host root's), so the device cgroup is edited.
    (record,) = [json.loads(path.read_text()) for path in hook_setup.records()]
    assert "rootless" not in record
    assert [edit["rule"] for edit in record["cgroup"]][:1] == [
        synthetic.suite_devices()["synth0"].rule()
    ]
