"""One record schema, unprivileged: what the hook writes (inject's record of a finalized plan)
is what `ocihook audit` reads back, field for field, through a JSON round trip."""

from __future__ import annotations

import json
import os

from ocihook import records
from ocihook.apply.sources import SourceTree
from ocihook.audit.records import Injected, container_from_dict
from ocihook.cgroups.grant import DeviceEdit
from ocihook.plan.decide import Decision, finalize
from ocihook.plan.model import DeviceNode, DeviceRule, Link, Mount, Plan
from ocihook.request.state import Container

LABEL = "system_u:object_r:container_file_t:s0:c1,c2"


def _plan() -> Plan:
    mounts = [
        Mount("usr/lib/libx.so.1", "/drv/usr/lib/libx.so.1", "/usr/lib64/libx.so.1", "library"),
        Mount("usr/bin/x-smi", "/drv/usr/bin/x-smi", "/usr/bin/x-smi", "binary"),
    ]
    node = DeviceNode("/dev/x0", "/drv/dev/x0", "c", 10, 237, 0o666, 0, "rw")
    plan = Plan(
        profile="synthetic",
        source_root="/drv",
        device_root="/drv",
        request="all",
        lib_dir="/usr/lib64",
        mounts=mounts,
        links=[Link("/usr/lib64/libx.so", "libx.so.1")],
        devices=[node],
    )
    return finalize(
        plan,
        Decision(
            lib_dir=None,
            lib_dir32=None,
            node_strategy="mknod",
            file_label=LABEL,
            ld_writer=None,
            device_cgroup=True,
            probe=(),
        ),
    )


def test_written_record_reads_back_in_the_audit():
    plan = _plan()
    container = Container(
        id="c1",
        status="creating",
        pid=os.getpid(),
        bundle="/b",
        rootfs="/b/rootfs",
        annotations={},
        mount_label=LABEL,
        process_label="system_u:system_r:container_t:s0:c1,c2",
    )
    trees = [SourceTree(m, -1, 64768, 100 + i) for i, m in enumerate(plan.mounts)]
    labels = ["system_u:object_r:container_ro_file_t:s0", None]
    edits = [
        DeviceEdit(
            "v1", "/sys/fs/cgroup/devices/x", "devices.allow", DeviceRule("c", 10, 237, "rw")
        )
    ]
    body = records.injection_record(container, plan, trees, labels, edits, "native")
    assert body["cgroup"] == [
        {
            "cgroup": "v1",
            "path": "/sys/fs/cgroup/devices/x",
            "action": "devices.allow",
            "rule": "c 10:237 rw",
        }
    ]
    assert (body["file_label"], body["ld_cache"]) == (LABEL, "native")
    assert body["version"] == records.RECORD_VERSION
    read = container_from_dict(json.loads(json.dumps(body)), "c1.json")
    assert (read.id, read.pid, read.rootfs, read.profile) == (
        "c1",
        os.getpid(),
        "/b/rootfs",
        "synthetic",
    )
    assert (read.mount_label, read.process_label) == (LABEL, container.process_label)
    assert read.status == records.RUNNING
    assert read.injected == [
        Injected(
            "library",
            "/usr/lib64/libx.so.1",
            "/drv/usr/lib/libx.so.1",
            64768,
            100,
            labels[0],
        ),
        Injected("binary", "/usr/bin/x-smi", "/drv/usr/bin/x-smi", 64768, 101, None),
        Injected("link", "/usr/lib64/libx.so", "libx.so.1"),
        Injected("device", "/dev/x0", "/drv/dev/x0", label=LABEL, numbers=(10, 237)),
    ]
    assert "rootless" not in body
    # The hook of a rootless container: no cgroup edits, the user named; audit reads it alike.
    rootless = records.injection_record(container, plan, trees, labels, [], "native", 1000)
    assert (rootless["cgroup"], rootless["rootless"]) == (
        [],
        {"host_uid": 1000, "device_cgroup": "unchanged"},
    )
    again = container_from_dict(json.loads(json.dumps(rootless)), "c1.json")
    assert again.injected == read.injected


def test_record_versions_and_default_dir_have_one_home():
    from ocihook.audit import records as audit_records

    assert audit_records.RECORD_VERSION is records.RECORD_VERSION
    assert audit_records.DEFAULT_STATE_DIR is records.DEFAULT_STATE_DIR
    assert records.RECORD_VERSION in records.READABLE_VERSIONS
