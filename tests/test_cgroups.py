"""Device cgroup module against the real kernel: v1 devices controller and v2 BPF programs.

Every test builds its own cgroup (removed afterwards, even on failure), moves a forked child
into it and lets the child open real device nodes of this host: the one the synthetic
driver's synth0 takes stands in for an accelerator, another is a device nobody asked for
(both picked from the running kernel by tests/support/host_devices.py, which runc denies),
/dev/null (1:3) one the runtime allowed. Needs root with CAP_SYS_ADMIN, the v1 devices controller at
/sys/fs/cgroup/devices and a cgroup2 mount at /sys/fs/cgroup/unified (this machine and CI).
"""

from __future__ import annotations

import ctypes
import errno
import os
import time
import uuid
from pathlib import Path

import pytest

from ocihook.cgroups import bpf
from ocihook.cgroups.grant import (
    CgroupTarget,
    DeviceRule,
    allow_devices,
    expand_slice,
    expected_cgroup_path,
    find_container_cgroup,
    plan_device_edits,
    revert_device_edits,
)
from ocihook.errors import OcihookError
from tests.support import device_programs, synthetic
from tests.support.device_programs import describe_device_access
from tests.support.sandbox import in_child

V1_ROOT = "/sys/fs/cgroup/devices"
V2_ROOT = "/sys/fs/cgroup/unified"
ACCEL = synthetic.suite_devices()["synth0"]  # a host device runc denies: the accelerator
ACCEL_NODE = ACCEL.path
OTHER_NODE = synthetic.UNREQUESTED.path  # another one, that nobody asks for
RW, RO = os.O_RDWR, os.O_RDONLY
ACCEL_RW = DeviceRule("c", ACCEL.major, ACCEL.minor, "rw")
ACCEL_R = DeviceRule("c", ACCEL.major, ACCEL.minor, "r")
# runc-like default-deny program: /dev/null rwm, /dev/zero rw.
RUNTIME_RULES = [(DeviceRule("c", 1, 3, "rwm"), True), (DeviceRule("c", 1, 5, "rw"), True)]


# ---------------------------------------------------------------------------
# helpers


def _join_and_open(cgroup_dir, opens):
    """In the child: join the cgroup, then try each open; 0 or the errno per open."""
    fd = os.open(os.path.join(cgroup_dir, "cgroup.procs"), os.O_WRONLY)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    results = []
    for path, flags in opens:
        try:
            os.close(os.open(path, flags))
            results.append(0)
        except OSError as exc:
            results.append(errno.errorcode.get(exc.errno, exc.errno))
    return results


def probe(cgroup_dir, *opens):
    """From inside the cgroup: 0 for each open that worked, else the errno name."""
    return in_child(_join_and_open, cgroup_dir, list(opens))


def _rmdir_tree(path):
    """Remove a test cgroup tree, deepest first, retrying while exiting tasks go away."""
    if not os.path.isdir(path):
        return
    for root, dirs, _files in os.walk(path, topdown=False):
        for d in dirs:
            _rmdir_tree(os.path.join(root, d))
    for _ in range(100):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            kill = os.path.join(path, "cgroup.kill")
            if os.path.exists(kill):
                with open(kill, "w") as f:
                    f.write("1")
            time.sleep(0.02)
    os.rmdir(path)


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


class Sleeper:
    """A child process parked in cgroups until closed."""

    def __init__(self, *cgroup_dirs):
        r, self._w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(self._w)
                os.read(r, 1)
            finally:
                os._exit(0)
        os.close(r)
        for d in cgroup_dirs:
            _write(os.path.join(d, "cgroup.procs"), str(self.pid))

    def release(self):
        """Let the child exit (its read end sees EOF once no process holds the write end)."""
        os.close(self._w)

    def wait(self):
        os.waitpid(self.pid, 0)

    def close(self):
        self.release()
        self.wait()


class Lab:
    """Test cgroups and parked processes; closing ends the processes, then removes the dirs."""

    def __init__(self):
        self.tops, self.sleepers = [], []

    def mkdir(self, root, rel=None):
        rel = rel or f"ocihook-test-{uuid.uuid4().hex[:12]}"
        top = os.path.join(root, rel.split("/")[0])
        if top not in self.tops:
            self.tops.append(top)
        path = os.path.join(root, rel)
        os.makedirs(path)
        return path

    def sleeper(self, *dirs):
        self.sleepers.append(Sleeper(*dirs))
        return self.sleepers[-1]

    def close(self):
        # Every later child inherited the earlier ones' write ends: release them all first.
        for s in self.sleepers:
            s.release()
        for s in self.sleepers:
            s.wait()
        for top in reversed(self.tops):
            _rmdir_tree(top)


@pytest.fixture
def lab():
    made = Lab()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def v2_cgroup(lab):
    """A fresh cgroup under the cgroup2 mount (no device program yet)."""
    return lab.mkdir(V2_ROOT)


def attach_program(cgroup_dir, insns, flags=bpf.BPF_F_ALLOW_MULTI):
    """Load and attach a device program the way runc does; returns its id."""
    fd = bpf.prog_load(insns, "Apache", "runtime_test")
    cfd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        bpf.prog_attach(cfd, fd, flags)
        return bpf.prog_info(fd).id
    finally:
        os.close(cfd)
        os.close(fd)


def attached(cgroup_dir):
    """(attach flags, [(id, decoded program)]) of the cgroup."""
    cfd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags, ids = bpf.prog_query(cfd)
    finally:
        os.close(cfd)
    out = []
    for prog_id in ids:
        fd = bpf.prog_fd_by_id(prog_id)
        try:
            out.append((prog_id, device_programs.decode_device_filter(bpf.prog_info(fd).xlated)))
        finally:
            os.close(fd)
    return flags, out


@pytest.fixture
def v2_runtime(v2_cgroup):
    """A v2 cgroup with a runc-like deny-by-default device program attached."""
    attach_program(v2_cgroup, bpf.device_filter(RUNTIME_RULES))
    return v2_cgroup


@pytest.fixture
def v1_cgroup(lab):
    """A fresh devices cgroup: deny all, allow /dev/null (like a runtime would)."""
    path = lab.mkdir(V1_ROOT)
    _write(os.path.join(path, "devices.deny"), "a")
    _write(os.path.join(path, "devices.allow"), "c 1:3 rwm")
    return path


# ---------------------------------------------------------------------------
# cgroup v2: the real work


@pytest.mark.root
def test_v2_runtime_program_denies_the_accelerator(v2_runtime):
    assert probe(v2_runtime, (ACCEL_NODE, RW), ("/dev/null", RW), ("/dev/zero", RW)) == [
        "EPERM",
        0,
        0,
    ]


@pytest.mark.root
def test_v2_allow_rw(v2_runtime):
    target = CgroupTarget("v2", v2_runtime)
    edits = allow_devices(target, [ACCEL_RW])
    assert edits == plan_device_edits(target, [ACCEL_RW])
    assert [e.record() for e in edits] == [
        {
            "cgroup": "v2",
            "path": v2_runtime,
            "action": "bpf-prepend-allow",
            "rule": ACCEL.rule("rw"),
        }
    ]
    got = probe(v2_runtime, (ACCEL_NODE, RW), (ACCEL_NODE, RO), (OTHER_NODE, RO), ("/dev/null", RW))
    assert got == [0, 0, "EPERM", 0]
    # /dev/zero was allowed rw but not mknod by the runtime: still so.
    assert probe(v2_runtime, ("/dev/zero", RW)) == [0]
    flags, progs = attached(v2_runtime)
    assert flags == bpf.BPF_F_ALLOW_MULTI and len(progs) == 1


@pytest.mark.root
def test_v2_allow_read_only(v2_runtime):
    allow_devices(CgroupTarget("v2", v2_runtime), [ACCEL_R])
    got = probe(v2_runtime, (ACCEL_NODE, RO), (ACCEL_NODE, RW), (OTHER_NODE, RO), ("/dev/null", RW))
    assert got == [0, "EPERM", "EPERM", 0]


@pytest.mark.root
def test_v2_decoder_reads_back_rules(v2_runtime):
    target = CgroupTarget("v2", v2_runtime)
    before = describe_device_access(target)
    assert [p["rules"] for p in before] == [["allow c 1:3 rwm", "allow c 1:5 rw"]]
    allow_devices(target, [ACCEL_RW, DeviceRule("b", 7, -1, "r")])
    (prog,) = describe_device_access(target)
    assert prog["rules"] == [
        f"allow {ACCEL.rule('rw')}",
        "allow b 7:* r",
        "allow c 1:3 rwm",
        "allow c 1:5 rw",
    ]
    assert prog["default"] == "deny" and prog["undecoded"] == 0
    assert prog["name"] == "ocihook_dev"


@pytest.mark.root
def test_v2_revert_restores_runtime_program(v2_runtime):
    target = CgroupTarget("v2", v2_runtime)
    _, before = attached(v2_runtime)
    edits = allow_devices(target, [ACCEL_RW])
    assert probe(v2_runtime, (ACCEL_NODE, RW)) == [0]
    revert_device_edits(target, edits)
    assert probe(v2_runtime, (ACCEL_NODE, RW), ("/dev/null", RW)) == ["EPERM", 0]
    _, after = attached(v2_runtime)
    assert [d for _, d in after] == [d for _, d in before]
    revert_device_edits(target, edits)  # nothing left to undo: no error


@pytest.mark.root
def test_v2_no_program_attached_is_an_error(v2_cgroup):
    with pytest.raises(OcihookError) as exc:
        allow_devices(CgroupTarget("v2", v2_cgroup), [ACCEL_RW])
    assert str(exc.value) == (
        f"cgroup v2 {v2_cgroup}: no device program attached (runc always attaches one); "
        "refusing to guess what restricts devices"
    )


@pytest.mark.root
def test_v2_every_attached_program_is_extended(v2_runtime):
    # systemd and runc may both attach one; access needs every program to allow.
    attach_program(v2_runtime, bpf.device_filter([(DeviceRule("c", 1, 3, "rwm"), True)]))
    assert probe(v2_runtime, ("/dev/null", RW), ("/dev/zero", RW)) == [0, "EPERM"]
    allow_devices(CgroupTarget("v2", v2_runtime), [ACCEL_RW])
    assert probe(v2_runtime, (ACCEL_NODE, RW), (OTHER_NODE, RO), ("/dev/zero", RW)) == [
        0,
        "EPERM",
        "EPERM",
    ]
    _, progs = attached(v2_runtime)
    assert len(progs) == 2
    assert all(d.rules[0] == (ACCEL_RW, True) for _, d in progs)


@pytest.mark.root
def test_v2_single_program_mode(v2_cgroup):
    attach_program(v2_cgroup, bpf.device_filter(RUNTIME_RULES), flags=0)
    allow_devices(CgroupTarget("v2", v2_cgroup), [ACCEL_RW])
    assert probe(v2_cgroup, (ACCEL_NODE, RW), (OTHER_NODE, RO)) == [0, "EPERM"]
    flags, progs = attached(v2_cgroup)
    assert flags == 0 and len(progs) == 1


@pytest.mark.root
def test_v2_unreadable_program_is_left_alone(v2_cgroup):
    # A program that calls a helper (bpf_get_current_uid_gid) cannot be copied as is.
    insns = [
        (bpf.JMP_CALL, 0, 0, 0, 15),
        (bpf.ALU32_MOV_K, 0, 0, 0, 0),
        (bpf.JMP_EXIT, 0, 0, 0, 0),
    ]
    prog_id = attach_program(v2_cgroup, insns)
    with pytest.raises(OcihookError) as exc:
        allow_devices(CgroupTarget("v2", v2_cgroup), [ACCEL_RW])
    assert str(exc.value) == (
        f"cgroup v2 {v2_cgroup}: device program {prog_id} instruction 0 calls a helper "
        "or uses a map; cannot extend it"
    )
    _, progs = attached(v2_cgroup)
    assert [i for i, _ in progs] == [prog_id]


@pytest.mark.root
def test_v2_failed_swap_keeps_old_program(v2_runtime):
    # The runtime replaced its program meanwhile: BPF_F_REPLACE refuses, nothing changes.
    from ocihook.cgroups import v2

    cfd = os.open(v2_runtime, os.O_RDONLY | os.O_DIRECTORY)
    stale = bpf.prog_load(bpf.device_filter(RUNTIME_RULES))
    new = bpf.prog_load(bpf.device_filter([(ACCEL_RW, True)]))
    try:
        _, before = attached(v2_runtime)
        with pytest.raises(bpf.BpfError) as exc:
            v2._swap(cfd, bpf.BPF_F_ALLOW_MULTI, stale, new)
        assert exc.value.errno == errno.ENOENT
        _, after = attached(v2_runtime)
        assert after == before
    finally:
        for fd in (cfd, stale, new):
            os.close(fd)
    assert probe(v2_runtime, (ACCEL_NODE, RW)) == ["EPERM"]


@pytest.mark.root
def test_v2_empty_rules_do_nothing(v2_cgroup):
    assert allow_devices(CgroupTarget("v2", v2_cgroup), []) == []


# ---------------------------------------------------------------------------
# cgroup v2, crun with the systemd cgroup manager: the process in a subgroup of its scope


@pytest.fixture
def crun_scope(lab):
    """(scope, subgroup) as crun + systemd lay them out on v2: <scope>/container."""
    scope = lab.mkdir(V2_ROOT, f"ocihook-test-{uuid.uuid4().hex[:12]}/libpod-c0ffee.scope")
    return scope, lab.mkdir(V2_ROOT, os.path.relpath(scope, V2_ROOT) + "/container")


@pytest.mark.root
@pytest.mark.parametrize(
    "where",
    [
        "subgroup",  # crun 1.8 to 1.18: its own program on <scope>/container
        "scope",  # crun 1.23 and later: systemd's program (DeviceAllow=) on the scope only
        "both",  # crun 1.19 to 1.22: both
    ],
)
def test_v2_programs_of_the_scope_and_its_subgroup_are_extended(crun_scope, where):
    scope, sub = crun_scope
    if where in ("subgroup", "both"):
        attach_program(sub, bpf.device_filter(RUNTIME_RULES))
    if where in ("scope", "both"):
        attach_program(scope, bpf.device_filter(RUNTIME_RULES))
    assert probe(sub, (ACCEL_NODE, RW), ("/dev/null", RW)) == ["EPERM", 0]
    target = CgroupTarget("v2", sub, scope)
    edits = allow_devices(target, [ACCEL_RW])
    assert [(e.path, e.rule) for e in edits] == [(sub, ACCEL_RW), (scope, ACCEL_RW)]
    assert probe(sub, (ACCEL_NODE, RW), (OTHER_NODE, RO), ("/dev/null", RW)) == [0, "EPERM", 0]
    revert_device_edits(target, edits)
    assert probe(sub, (ACCEL_NODE, RW), ("/dev/null", RW)) == ["EPERM", 0]


@pytest.mark.root
def test_v2_no_program_on_the_scope_or_its_subgroup_is_an_error(crun_scope):
    scope, sub = crun_scope
    with pytest.raises(OcihookError) as exc:
        allow_devices(CgroupTarget("v2", sub, scope), [ACCEL_RW])
    assert str(exc.value) == (
        f"cgroup v2 {sub} and its scope {scope}: no device program attached (the runtime "
        "always attaches one); refusing to guess what restricts devices"
    )


@pytest.mark.root
def test_v2_a_failure_on_the_scope_undoes_the_subgroup(crun_scope):
    scope, sub = crun_scope
    attach_program(sub, bpf.device_filter(RUNTIME_RULES))
    helper = [
        (bpf.JMP_CALL, 0, 0, 0, 15),
        (bpf.ALU32_MOV_K, 0, 0, 0, 0),
        (bpf.JMP_EXIT, 0, 0, 0, 0),
    ]
    attach_program(scope, helper)  # a program that cannot be copied
    _, before = attached(sub)
    with pytest.raises(OcihookError):
        allow_devices(CgroupTarget("v2", sub, scope), [ACCEL_RW])
    _, after = attached(sub)
    assert [d for _, d in after] == [d for _, d in before]


def _find_v2(pid, cgroups_path, annotations):
    """In a child: hide the v1 devices mount (a cgroup v2 host for devices), then look."""
    _private_mount_ns()
    _check(libc.umount2(V1_ROOT.encode(), MNT_DETACH))
    try:
        t = find_container_cgroup(pid, cgroups_path, annotations=annotations)
    except OcihookError as exc:
        return str(exc)
    return [t.version, t.path, t.scope, t.unit]


@pytest.mark.root
def test_find_crun_subgroup_of_the_systemd_scope(lab):
    tag = uuid.uuid4().hex[:8]
    rel = f"ocihooktest.slice/ocihooktest-{tag}.slice/libpod-c{tag}.scope"
    scope = lab.mkdir(V2_ROOT, rel)
    sub = lab.mkdir(V2_ROOT, rel + "/container")
    named = lab.mkdir(V2_ROOT, rel + "/payload")
    in_sub, in_named = lab.sleeper(sub), lab.sleeper(named)
    systemd = f"ocihooktest-{tag}.slice:libpod:c{tag}"
    unit = f"libpod-c{tag}.scope"
    assert in_child(_find_v2, in_sub.pid, systemd, {}) == ["v2", sub, scope, unit]
    annotated = {"run.oci.systemd.subgroup": "payload"}
    assert in_child(_find_v2, in_named.pid, systemd, annotated) == ["v2", named, scope, unit]
    mismatch = (
        f"cgroupsPath '{systemd}' (/{rel}) does not match the cgroup /{rel}/payload "
        f"of process {in_named.pid}"
    )
    assert in_child(_find_v2, in_named.pid, systemd, {}) == mismatch  # not crun's default
    no_subgroup = {"run.oci.systemd.subgroup": ""}
    assert in_child(_find_v2, in_sub.pid, systemd, no_subgroup) == (
        f"cgroupsPath '{systemd}' (/{rel}) does not match the cgroup /{rel}/container "
        f"of process {in_sub.pid}"
    )
    # a cgroupfs cgroupsPath: no runtime puts the process in a subgroup of it
    assert in_child(_find_v2, in_sub.pid, f"/{rel}", {}).startswith(f"cgroupsPath '/{rel}'")
    bad = {"run.oci.systemd.subgroup": "../x"}
    assert in_child(_find_v2, in_sub.pid, systemd, bad) == (
        "annotation run.oci.systemd.subgroup '../x' is not one cgroup name"
    )


# ---------------------------------------------------------------------------
# cgroup v1


@pytest.mark.root
def test_v1_allow_rw(v1_cgroup):
    target = CgroupTarget("v1", v1_cgroup)
    assert probe(v1_cgroup, (ACCEL_NODE, RW), ("/dev/null", RW)) == ["EPERM", 0]
    edits = allow_devices(target, [ACCEL_RW])
    assert edits == plan_device_edits(target, [ACCEL_RW])
    assert [e.record() for e in edits] == [
        {"cgroup": "v1", "path": v1_cgroup, "action": "devices.allow", "rule": ACCEL.rule("rw")}
    ]
    assert probe(v1_cgroup, (ACCEL_NODE, RW), (OTHER_NODE, RO), ("/dev/null", RW)) == [
        0,
        "EPERM",
        0,
    ]
    with open(os.path.join(v1_cgroup, "devices.list")) as f:
        assert ACCEL.rule("rw") in f.read().splitlines()


@pytest.mark.root
def test_v1_allow_read_only(v1_cgroup):
    allow_devices(CgroupTarget("v1", v1_cgroup), [ACCEL_R])
    got = probe(v1_cgroup, (ACCEL_NODE, RO), (ACCEL_NODE, RW), (OTHER_NODE, RO), ("/dev/null", RW))
    assert got == [0, "EPERM", "EPERM", 0]


@pytest.mark.root
def test_v1_revert(v1_cgroup):
    target = CgroupTarget("v1", v1_cgroup)
    edits = allow_devices(target, [ACCEL_RW])
    revert_device_edits(target, edits)
    assert probe(v1_cgroup, (ACCEL_NODE, RW), ("/dev/null", RW)) == ["EPERM", 0]


@pytest.mark.root
def test_v1_parent_denies_all_or_nothing(v1_cgroup):
    # A child cannot get more than its parent: the second rule fails, the first is undone.
    child = os.path.join(v1_cgroup, "inner")
    os.mkdir(child)
    target = CgroupTarget("v1", child)
    with pytest.raises(OcihookError) as exc:
        allow_devices(target, [DeviceRule("c", 1, 3, "rw"), ACCEL_RW])
    assert str(exc.value) == (
        f"cannot write '{ACCEL.rule('rw')}' to {child}/devices.allow: Operation not permitted "
        "(the parent cgroup does not allow it)"
    )
    assert probe(child, ("/dev/null", RW)) == ["EPERM"]


# ---------------------------------------------------------------------------
# finding the container's cgroup


@pytest.mark.root
def test_find_v1_cgroupfs_forms(v1_cgroup, lab):
    s = lab.sleeper(v1_cgroup)
    want = CgroupTarget("v1", v1_cgroup)
    name = os.path.basename(v1_cgroup)
    assert find_container_cgroup(s.pid) == want
    assert find_container_cgroup(s.pid, f"/{name}") == want
    assert find_container_cgroup(s.pid, name) == want  # relative cgroupfs path
    with pytest.raises(OcihookError) as exc:
        find_container_cgroup(s.pid, "/somewhere/else")
    assert str(exc.value) == (
        f"cgroupsPath '/somewhere/else' (/somewhere/else) does not match "
        f"the cgroup /{name} of process {s.pid}"
    )


@pytest.mark.root
def test_find_systemd_form(lab):
    tag = uuid.uuid4().hex[:8]
    rel = f"ocihooktest.slice/ocihooktest-{tag}.slice/crio-c{tag}.scope"
    scope = lab.mkdir(V1_ROOT, rel)
    s = lab.sleeper(scope)
    want = CgroupTarget("v1", scope, unit=f"crio-c{tag}.scope")
    assert find_container_cgroup(s.pid, f"ocihooktest-{tag}.slice:crio:c{tag}") == want
    assert find_container_cgroup(s.pid, f"/{rel}") == CgroupTarget("v1", scope)
    with pytest.raises(OcihookError) as exc:
        find_container_cgroup(s.pid, f"ocihooktest-{tag}.slice:crio:other")
    assert str(exc.value) == (
        f"cgroupsPath 'ocihooktest-{tag}.slice:crio:other' "
        f"(/ocihooktest.slice/ocihooktest-{tag}.slice/crio-other.scope) does not match "
        f"the cgroup /{rel} of process {s.pid}"
    )


libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, MS_REC, MS_PRIVATE, MNT_DETACH = 0x20000, 0x4000, 0x40000, 2


def _check(ret):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _private_mount_ns():
    """In a child: own mount namespace, nothing propagates back to the host."""
    _check(libc.unshare(CLONE_NEWNS))
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None))


def _find_without_v1_devices(pid):
    """In a child: hide the v1 devices mount (a pure v2 host for devices), then look."""
    _private_mount_ns()
    _check(libc.umount2(V1_ROOT.encode(), MNT_DETACH))
    t = find_container_cgroup(pid)
    return [t.version, t.path]


@pytest.mark.root
def test_find_v2_when_devices_not_on_v1(v2_cgroup, v1_cgroup, lab):
    s = lab.sleeper(v1_cgroup, v2_cgroup)
    assert find_container_cgroup(s.pid) == CgroupTarget("v1", v1_cgroup)  # hybrid: v1
    assert in_child(_find_without_v1_devices, s.pid) == ["v2", v2_cgroup]


def _find_with_cgroup_dir_hidden(pid, parent, make_dir):
    """In a child: cover `parent` with a tmpfs, so the process's cgroup dir is not there."""
    _private_mount_ns()
    _check(libc.mount(b"tmpfs", parent.encode(), b"tmpfs", 0, None))
    if make_dir:
        os.makedirs(os.path.join(parent, "x"))
    try:
        find_container_cgroup(pid)
    except OcihookError as exc:
        return str(exc)
    return "no error"


@pytest.mark.root
def test_find_missing_or_foreign_dir(lab):
    inner = lab.mkdir(V1_ROOT, f"ocihook-test-{uuid.uuid4().hex[:12]}/x")
    parent = os.path.dirname(inner)
    s = lab.sleeper(inner)
    got = in_child(_find_with_cgroup_dir_hidden, s.pid, parent, False)
    assert got == f"cgroup of process {s.pid}: {inner} does not exist"
    got = in_child(_find_with_cgroup_dir_hidden, s.pid, parent, True)
    assert got == f"cgroup directory {inner} is not on the {V1_ROOT} cgroup mount"


@pytest.mark.root
def test_find_refuses_root_cgroup(lab):
    s = lab.sleeper(V1_ROOT)
    with pytest.raises(OcihookError) as exc:
        find_container_cgroup(s.pid)
    assert (
        str(exc.value) == f"process {s.pid} is in the root cgroup; refusing to touch host devices"
    )


def test_allow_on_missing_dir():
    with pytest.raises(OcihookError) as exc:
        allow_devices(CgroupTarget("v1", V1_ROOT + "/no-such-cgroup"), [ACCEL_RW])
    assert str(exc.value) == f"cgroup v1: {V1_ROOT}/no-such-cgroup does not exist"
    with pytest.raises(OcihookError) as exc:
        allow_devices(CgroupTarget("v2", V2_ROOT + "/../x"), [ACCEL_RW])
    assert str(exc.value) == f"cgroup v2: '{V2_ROOT}/../x' is not a clean absolute path"


def test_find_missing_pid():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # reaped: the pid is free
    with pytest.raises(OcihookError) as exc:
        find_container_cgroup(pid)
    assert str(exc.value) == f"container process {pid} not found: /proc/{pid}/cgroup does not exist"
    with pytest.raises(OcihookError) as exc:
        find_container_cgroup(0)
    assert str(exc.value) == "container pid 0 is not a positive integer"


@pytest.mark.parametrize(
    "cgroups_path, message",
    [
        ("/a/../b", "cgroupsPath '/a/../b' contains '..'"),
        ("../escape", "cgroupsPath '../escape' contains '..'"),
        (
            "machine.slice:libpod:..",
            "cgroupsPath 'machine.slice:libpod:..' has '/' or '..' in prefix or name",
        ),
        (
            "machine.slice:x/y:z",
            "cgroupsPath 'machine.slice:x/y:z' has '/' or '..' in prefix or name",
        ),
        ("a:b", "cgroupsPath 'a:b' is not of the form slice:prefix:name"),
        ("machine:libpod:x", "cgroupsPath slice 'machine' is not a valid systemd slice name"),
        ("a--b.slice:p:x", "cgroupsPath slice 'a--b.slice' is not a valid systemd slice name"),
    ],
)
@pytest.mark.root
def test_bad_cgroups_path(v1_cgroup, lab, cgroups_path, message):
    s = lab.sleeper(v1_cgroup)
    with pytest.raises(OcihookError) as exc:
        find_container_cgroup(s.pid, cgroups_path)
    assert str(exc.value) == message


def test_expand_slice_like_systemd():
    assert expand_slice("-.slice") == ""
    assert expand_slice("machine.slice") == "machine.slice"
    assert expand_slice("kubepods-burstable-pod1.slice") == (
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
    )
    assert expected_cgroup_path("machine.slice:libpod:abc") == "/machine.slice/libpod-abc.scope"
    assert expected_cgroup_path(":libpod:abc") == "/system.slice/libpod-abc.scope"
    assert expected_cgroup_path("-.slice::abc") == "/abc.scope"
    assert expected_cgroup_path("user.slice:x:y.slice") == "/user.slice/y.slice"
    assert expected_cgroup_path("/libpod_parent/libpod-abc") == "/libpod_parent/libpod-abc"


def test_rules_are_checked():
    target = CgroupTarget("v1", "/nonexistent")
    for bad, msg in [
        (DeviceRule("a", 1, 3, "rw"), "device type 'a' is not 'c' or 'b'"),
        (DeviceRule("c", 1, 3, "rx"), "device access 'rx' is not a non-empty subset of 'rwm'"),
        (DeviceRule("c", 1, 3, ""), "device access '' is not a non-empty subset of 'rwm'"),
        (
            DeviceRule("c", 4096, 3, "r"),
            "device major 4096 is out of range 0..4095 (or -1 for any)",
        ),
    ]:
        with pytest.raises(OcihookError) as exc:
            plan_device_edits(target, [bad])
        assert str(exc.value) == f"device rule {bad.type} {bad.major}:{bad.minor}: {msg}"
    rules = [ACCEL_RW, ACCEL_RW, ACCEL_R]
    assert [e.rule for e in plan_device_edits(target, rules)] == [ACCEL_RW, ACCEL_R]
    assert [e.record()["rule"] for e in plan_device_edits(target, rules)] == [
        ACCEL.rule("rw"),
        ACCEL.rule("r"),
    ]


@pytest.mark.root
def test_v1_describe(v1_cgroup):
    target = CgroupTarget("v1", v1_cgroup)
    allow_devices(target, [ACCEL_RW])
    assert describe_device_access(target) == [{"devices.list": ["c 1:3 rwm", ACCEL.rule("rw")]}]


def test_device_edits_match_golden():
    """The edits for a plan's rules, typed from the plan to the kernel, as the v1 writer
    writes them (the record's text form) and as the BPF assembler prefixes the v2 program
    (its instructions, encoded): tests/golden/cgroup-edits.json. The NVIDIA node numbers of
    tests/support/hosts.py, a duplicate (dropped) and a wildcard rule."""
    from tests.support import hosts
    from tests.support.golden import golden_json

    rules = [DeviceRule("c", major, minor, "rw") for major, minor in hosts.NODES.values()]
    rules += [rules[0], DeviceRule("b", 8, -1, "r")]
    edits = {
        version: [e.record() for e in plan_device_edits(CgroupTarget(version, "/cg"), rules)]
        for version in ("v1", "v2")
    }
    typed = [e.rule for e in plan_device_edits(CgroupTarget("v2", "/cg"), rules)]
    assert typed == rules[:-2] + rules[-1:]  # the plan's own rules, as they are
    prefix = bpf.allow_prefix(typed)
    value = {
        "edits": edits,
        "v1_lines": [e["rule"] for e in edits["v1"]],
        "v2_prefix": [list(insn) for insn in prefix],
        "v2_prefix_hex": bpf.encode(prefix).hex(),
    }
    assert value == golden_json(Path(__file__).parent / "golden/cgroup-edits.json", value)
    decoded = device_programs.decode_device_filter(prefix + bpf.device_filter([]))
    assert [rule for rule, _ in decoded.rules] == typed


# ---------------------------------------------------------------------------
# the systemd cgroup manager: the unit's DeviceAllow= too (tests/test_systemd_unit.py has
# the D-Bus side; here the cgroup edit around it, on real cgroups)


@pytest.fixture
def systemd_peer(tmp_path, monkeypatch):
    """systemd 'booted' (BOOTED_DIR made), its private socket a stand-in serving one strict
    unit, libpod-c1.scope (tests/support/dbus.py); no system bus."""
    from ocihook.cgroups import systemd
    from tests.support.dbus import StandInSystemd, Unit

    (tmp_path / "booted").mkdir()
    monkeypatch.setattr(systemd, "BOOTED_DIR", str(tmp_path / "booted"))
    monkeypatch.setattr(systemd, "PRIVATE_SOCKET", str(tmp_path / "private"))
    monkeypatch.setattr(systemd, "SYSTEM_BUS_SOCKET", str(tmp_path / "no-bus"))
    server = StandInSystemd(str(tmp_path / "private"), {"libpod-c1.scope": Unit("strict")})
    try:
        yield server
    finally:
        server.close()


@pytest.mark.root
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_unit_gets_the_rules_after_the_cgroup(version, systemd_peer, request):
    cgroup = request.getfixturevalue("v1_cgroup" if version == "v1" else "v2_runtime")
    target = CgroupTarget(version, cgroup, unit="libpod-c1.scope")
    edits = allow_devices(target, [ACCEL_RW])
    path = f"/dev/char/{ACCEL.major}:{ACCEL.minor}"
    assert [e.record() for e in edits][1:] == [
        {
            "cgroup": "systemd",
            "path": "libpod-c1.scope",
            "action": "unit-device-allow",
            "rule": ACCEL.rule("rw"),
        }
    ]
    assert systemd_peer.units["libpod-c1.scope"].allow == [(path, "rw")]
    assert probe(cgroup, (ACCEL_NODE, RW)) == [0]
    revert_device_edits(target, edits)  # the cgroup's part; the unit goes with the container
    assert probe(cgroup, (ACCEL_NODE, RW), ("/dev/null", RW)) == ["EPERM", 0]


@pytest.mark.root
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_unit_that_cannot_be_told_undoes_the_cgroup_edit(version, systemd_peer, request):
    cgroup = request.getfixturevalue("v1_cgroup" if version == "v1" else "v2_runtime")
    before = attached(cgroup) if version == "v2" else None
    systemd_peer.fail_set = "org.freedesktop.DBus.Error.AccessDenied"
    target = CgroupTarget(version, cgroup, unit="libpod-c1.scope")
    with pytest.raises(OcihookError) as exc:
        allow_devices(target, [ACCEL_RW])
    assert str(exc.value) == (
        "systemd unit libpod-c1.scope: DeviceAllow= not added: D-Bus "
        "org.freedesktop.systemd1.Manager.SetUnitProperties: "
        "org.freedesktop.DBus.Error.AccessDenied: refused by the stand-in"
    )
    assert probe(cgroup, (ACCEL_NODE, RW), ("/dev/null", RW)) == ["EPERM", 0]
    if version == "v2":
        assert [p for _, p in attached(cgroup)[1]] == [p for _, p in before[1]]


@pytest.mark.root
def test_without_systemd_as_pid_1_the_cgroup_alone_is_edited(v1_cgroup, monkeypatch, tmp_path):
    from ocihook.cgroups import systemd

    monkeypatch.setattr(systemd, "BOOTED_DIR", str(tmp_path / "absent"))
    lines = []
    target = CgroupTarget("v1", v1_cgroup, unit="libpod-c1.scope")
    edits = allow_devices(target, [ACCEL_RW], lines.append)
    assert edits == plan_device_edits(target, [ACCEL_RW])
    assert lines == [
        f"systemd unit libpod-c1.scope: systemd is not PID 1 ({tmp_path}/absent is absent): "
        "no unit to tell, the device rules are in the cgroup only"
    ]
