"""Rootless podman, for real: an ordinary user with subordinate id ranges runs podman + runc;
the hook runs as root of that user's namespace, with the user's rights on the host.

The containers get the driver as root podman's do, less what a user namespace cannot do:
device nodes are bind mounts of the host's nodes (no mknod), the device cgroup is not
touched (the record says so), and records go to /run/user/<uid>/ocihook. The config is
trusted under the rootless rule (owner outside the namespace, nothing writable by group,
others or the namespace, parents likewise); what cannot work rootless is one line that
names the reason and the CDI route.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import uuid
from pathlib import Path

from ocihook.check.hooksdirs import DEFAULT_DIR
from tests.support import podman, rootless, synthetic

SMI = "/usr/bin/synth-smi"
CDI_ROUTE = "ocihook cdi generate --output /etc/cdi"
# How a refused device node ends: CDI would get the same host permissions (below).
NO_CDI = (
    "or use root podman (CDI cannot help: a rootless container gets its nodes as bind mounts too)"
)
REPO = Path(__file__).resolve().parent.parent


def ocihook_lines(stderr: str) -> list[str]:
    return [line[line.index("ocihook: ") :] for line in stderr.splitlines() if "ocihook: " in line]


def test_rootless_container_gets_library_through_ld_cache_and_every_node(
    rootless_setup, rootless_image_rhel
):
    """The RHEL-layout image's loader (Debian's) searches /usr/lib64 only through the ld
    cache, so "loaded from /usr/lib64" proves the cache the hook wrote; every node opens
    read-write; each is a bind mount of the host's node, which the user may open there."""
    result = rootless_setup.run(
        rootless_image_rhel,
        [
            "/bin/sh",
            "-c",
            f"{SMI} && grep -c libsynth.so.1 /etc/ld.so.cache && "
            "grep -c ' /dev/synth' /proc/self/mountinfo && "
            "stat -c '%u %a' /usr/lib64/libsynth.so.1",
        ],
        devices="all",
    )
    assert result.returncode == 0, result.stderr
    assert "libsynth 1.2.3 loaded from /usr/lib64/libsynth.so.1" in result.stdout
    names = synthetic.DEVICE_NAMES + synthetic.CONTROL_NAMES
    for name in names:
        assert synthetic.opened(name) in result.stdout
    lines = result.stdout.strip().splitlines()
    assert int(lines[-3]) >= 1  # the ld cache names the library
    assert int(lines[-2]) == len(names)  # every node is a bind mount
    assert lines[-1].split()[0] == "0"  # the soname link belongs to the container's root
    # On the host, the user itself may open every node read-write (their mode gives it).
    nodes = [str(rootless_setup.synth_root / "dev" / name) for name in names]
    opener = "; ".join(f"exec 3<>{node} || exit 1" for node in nodes)
    assert rootless_setup.user.run("/bin/sh", "-c", opener).returncode == 0
    record = result.record()
    assert record is not None, f"no record in {rootless_setup.state_dir}"
    assert record["rootless"] == {"host_uid": rootless_setup.user.uid, "device_cgroup": "unchanged"}
    assert record["cgroup"] == []
    assert record["ld_cache"] == "native"
    assert record["status"] == "exited"  # poststop ran, in the same per-user dir
    assert sorted(d["path"] for d in record["devices"]) == sorted(f"/dev/{n}" for n in names)


def test_rootless_podman_runs_the_hook_from_its_default_hooks_dir(
    rootless_setup, rootless_image_rhel
):
    """No --hooks-dir: rootless podman reads its default hooks dir,
    /usr/share/containers/oci/hooks.d, where make install and the RPM put the registration.
    The shipped hooks.d/ocihook.json goes there for the test's duration with this install's
    hook and config, and its gate replaced by an annotation whose value only this test sets
    (no other container on the machine runs it); it is removed afterwards, whatever happens,
    with the dirs made for it. podman gets CONTAINERS_CONF, an empty containers.conf: its
    built-in hooks_dir, whatever the host's or the user's containers.conf say. The same
    registration in /etc/containers/oci/hooks.d instead does nothing (checked by hand)."""
    key = "ocihook.test/rootless-default-hooks-dir"
    value = uuid.uuid4().hex
    document = json.loads((REPO / "hooks.d" / "ocihook.json").read_text())
    document["hook"]["path"] = str(rootless_setup.hook)
    args = document["hook"]["args"]
    args[args.index("--config") + 1] = str(rootless_setup.config)
    document["when"] = {"annotations": {"^" + key.replace(".", "\\.") + "$": f"^{value}$"}}
    empty_conf = rootless_setup.work / "containers.conf"
    empty_conf.write_text("")
    os.chown(empty_conf, rootless_setup.user.uid, rootless_setup.user.gid)
    env = {"CONTAINERS_CONF": str(empty_conf)}
    command = ["/bin/sh", "-c", f"ls /dev; exec {SMI} /dev/synth0"]
    with podman.placed(DEFAULT_DIR, f"zz-ocihook-rootless-{value[:12]}.json", document) as path:
        gated = rootless_setup.run(
            rootless_image_rhel,
            command,
            devices="0",
            extra=["--annotation", f"{key}={value}"],
            env=env,
            hooks_dir=False,
        )
        other = rootless_setup.run(  # ocihook.io/devices alone, as any other container
            rootless_image_rhel, command, devices="0", env=env, hooks_dir=False
        )
    assert not path.exists()
    assert gated.returncode == 0, gated.stderr
    assert "libsynth 1.2.3 loaded from /usr/lib64/libsynth.so.1" in gated.stdout
    assert synthetic.opened("synth0") in gated.stdout
    record = gated.record()
    assert record is not None, f"no record in {rootless_setup.state_dir}"
    assert record["rootless"]["host_uid"] == rootless_setup.user.uid
    assert record["status"] == "running"  # the shipped file has no poststop stage
    assert other.returncode == 127, other.stderr  # no synth-smi: the hook never ran
    assert other.record() is None
    assert not [name for name in other.stdout.split() if name.startswith("synth")]


def test_rootless_keep_id_container(rootless_setup, rootless_image_rhel):
    """`--userns=keep-id` (the container's user is the host user) nests a user namespace in
    the rootless one: the config's mappings are in the rootless namespace's ids, as the
    hook's are; the driver works the same."""
    result = rootless_setup.run(
        rootless_image_rhel,
        ["/bin/sh", "-c", f"id -u && {SMI} /dev/synth0 && stat -c %u /usr/lib64/libsynth.so.1"],
        devices="0",
        extra=["--userns=keep-id"],
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == str(rootless_setup.user.uid)  # the host user, inside
    assert "libsynth 1.2.3 loaded from /usr/lib64/libsynth.so.1" in result.stdout
    assert synthetic.opened("synth0") in result.stdout
    assert lines[-1] == "0"  # the link is the container root's, mapped through the config
    assert result.record()["rootless"]["host_uid"] == rootless_setup.user.uid


def test_rootless_records_and_cache_are_the_users(rootless_setup, rootless_image_rhel):
    """The hook had only the user's rights: what it wrote is the user's, 0700/0600, in the
    user's runtime dir; the root default /run/ocihook is never used."""
    result = rootless_setup.run(rootless_image_rhel, [SMI, "/dev/synth0"], devices="0")
    assert result.returncode == 0, result.stderr
    user = rootless_setup.user
    state = rootless_setup.state_dir
    for path, mode in (
        (state, 0o700),
        (state / "cache", 0o700),
        (state / f"{result.cid}.json", 0o600),
    ):
        st = path.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (user.uid, user.gid, mode)
    assert any((state / "cache").iterdir()), "the compiled config was cached"
    assert "synth1" not in result.stdout
    log = rootless_setup.log.read_text()
    assert f"{result.cid}: injected" in log
    assert "cgroup v1" not in log and "cgroup v2" not in log  # no device cgroup edit


def test_rootless_device_nobody_asked_for_stays_out(rootless_setup, rootless_image_busybox):
    result = rootless_setup.run(rootless_image_busybox, ["/bin/ls", "/dev"], devices="1")
    assert result.returncode == 0, result.stderr
    listed = result.stdout.split()
    assert "synth1" in listed and "synthctl" in listed
    assert "synth0" not in listed and "synth2" not in listed
    plain = rootless_setup.run(rootless_image_busybox, ["/bin/ls", "/dev"])
    assert plain.returncode == 0, plain.stderr
    assert not [n for n in plain.stdout.split() if n.startswith("synth")]
    assert plain.record() is None  # the hooks.d gate: the hook never ran


def test_rootless_sandboxed_ldconfig_and_classic_mounts(rootless_setup, rootless_image_rhel):
    """The other two ways the hook works, rootless too: the host's static ldconfig run in
    its sandbox, and mount(2) bind mounts instead of the new mount API."""
    rootless_setup.write_config(
        **rootless_setup.base_config(ldconfig={"writer": "ldconfig"}, mount_api="classic")
    )
    result = rootless_setup.run(rootless_image_rhel, [SMI], devices="all")
    assert result.returncode == 0, result.stderr
    assert "libsynth 1.2.3 loaded from /usr/lib64/libsynth.so.1" in result.stdout
    assert synthetic.opened("synth2") in result.stdout
    assert result.record()["ld_cache"] == "ldconfig"


def _acl(uid: int) -> bytes:
    """A POSIX ACL (the kernel's xattr format, version 2) giving `uid` read-write and
    nobody else anything: user::rw, user:UID:rw, group::-, mask::rw, other::-."""
    entries = [(0x01, 6, 0xFFFFFFFF), (0x02, 6, uid), (0x04, 0, 0xFFFFFFFF)]
    entries += [(0x10, 6, 0xFFFFFFFF), (0x20, 0, 0xFFFFFFFF)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def test_rootless_nodes_keep_host_permissions(rootless_setup, rootless_image_rhel):
    """No device cgroup and no mknod: the host node's permissions decide. Host root's 0600,
    and a node of a host group the user is in (as video or render are), are refused before
    anything is changed, in one line: a rootless container holds none of the user's host
    groups under runc (`--group-add keep-groups` passes the hook, and the open still
    fails). The user's own group, and an ACL naming the user, open."""
    node = rootless_setup.synth_root / "dev" / "synth0"
    user = rootless_setup.user
    group = rootless.ensure_group(user)
    cases = {
        "root-only": (0, 0, 0o600, None, []),
        "host-group": (0, group, 0o660, None, []),
        "keep-groups": (0, group, 0o660, None, ["--group-add", "keep-groups"]),
        "users-group": (0, user.gid, 0o660, None, []),
        "acl": (0, 0, 0o600, _acl(user.uid), []),
    }
    results = {}
    for case, (uid, gid, mode, acl, extra) in cases.items():
        os.chown(node, uid, gid)
        os.chmod(node, mode)
        if acl:
            os.setxattr(node, "system.posix_acl_access", acl)
        try:
            result = rootless_setup.run(rootless_image_rhel, [SMI, "/dev/synth0"], "0", extra=extra)
            on_host = user.run("/bin/sh", "-c", f"exec 3<>{node}").returncode  # the user's
            results[case] = (result, on_host)
        finally:
            if acl:
                os.removexattr(node, "system.posix_acl_access")
            os.chown(node, 0, 0)
            os.chmod(node, 0o666)
    for case, mode, user_may in (("root-only", "0600", False), ("host-group", "0660", True)):
        refused, on_host = results[case]
        assert refused.returncode != 0 and (on_host == 0) == user_may, case
        assert refused.record() is None
        (line,) = ocihook_lines(refused.stderr)
        assert f"rootless: device {node} (" in line and f"mode {mode}" in line, line
        assert "holds none of the user's host groups" in line
        assert line.endswith(NO_CDI), line
    result, on_host = results["keep-groups"]
    assert on_host == 0 and result.returncode != 0, result.stderr
    assert "cannot open /dev/synth0: Permission denied" in result.stdout
    for case in ("users-group", "acl"):
        result, on_host = results[case]
        assert result.returncode == 0, (case, result.stderr)
        assert synthetic.opened("synth0") in result.stdout
        assert on_host == 0


def test_rootless_cdi_gets_the_same_host_permissions(rootless_setup, rootless_image_busybox):
    """Why the refusal of a node the user cannot open names no CDI route: a rootless
    container gets a CDI device node as a bind mount of the host's node too (runc cannot
    mknod in a user namespace, nor set a device cgroup), so the host node's mode decides
    there as well. A CDI spec of the test's own (written by hand, so that the node is at the
    same path in the container as on the host, which is where runc bind-mounts it from; in
    /var/run/cdi, which rootless podman reads, under a kind of its own, removed afterwards)
    names the driver's synth0: it opens while the node is 0666, and not once it is root's
    0600; no hook runs (no ocihook.io/devices)."""
    node = rootless_setup.synth_root / "dev" / "synth0"
    kind = f"ocihook.test/t{uuid.uuid4().hex[:12]}"
    spec = Path("/var/run/cdi") / (kind.replace("/", "_") + ".json")
    document = {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [{"name": "n", "containerEdits": {"deviceNodes": [{"path": str(node)}]}}],
    }
    command = ["/bin/sh", "-c", f"exec 3<>{node} && echo opened"]
    results = {}
    try:
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(json.dumps(document))
        for mode in (0o666, 0o600):
            os.chmod(node, mode)
            results[mode] = rootless_setup.run(
                rootless_image_busybox, command, extra=["--device", f"{kind}=n"]
            )
    finally:
        spec.unlink(missing_ok=True)
        os.chmod(node, 0o666)
    assert results[0o666].returncode == 0, results[0o666].stderr
    assert results[0o666].stdout.strip() == "opened"
    refused = results[0o600]
    assert refused.returncode != 0 and "opened" not in refused.stdout
    assert "Permission denied" in refused.stderr, refused.stderr
    assert refused.record() is None


def _refused(setup, image) -> rootless.RootlessRun:
    result = setup.run(image, [SMI], devices="all")
    assert result.returncode != 0
    assert result.record() is None
    lines = ocihook_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "internal error" not in lines[0]
    return result


def test_rootless_refuses_a_config_the_user_owns(rootless_setup, rootless_image_busybox):
    """The user's containers run as the user: a config the user owns is one they may have
    written. One line with the reason and the CDI route."""
    os.chown(rootless_setup.config, rootless_setup.user.uid, rootless_setup.user.gid)
    try:
        result = _refused(rootless_setup, rootless_image_busybox)
    finally:
        os.chown(rootless_setup.config, 0, 0)
    line = ocihook_lines(result.stderr)[0]
    assert f"config {rootless_setup.config}: rootless: owned by uid 0, host uid" in line
    assert CDI_ROUTE in line and "podman run --device" in line


def test_rootless_refuses_a_subordinate_uid_that_shows_as_the_overflow_uid(
    rootless_setup, rootless_image_busybox
):
    """The namespace maps its uid 65534 to a subordinate uid: a file of that uid shows as
    65534, as host root's do. The hook tells them apart (O_NOATIME: EPERM for an owner
    outside the namespace only) and refuses it, file or parent."""
    first = _subordinate_start(rootless_setup.user)
    disguised = first + 65534 - 1  # namespace uid 65534 = the 65534th subordinate uid
    for path in (rootless_setup.config, rootless_setup.config.parent):
        os.chown(path, disguised, 0)
        try:
            result = _refused(rootless_setup, rootless_image_busybox)
        finally:
            os.chown(path, 0, 0)
        line = ocihook_lines(result.stderr)[0]
        assert "owned by a uid the user namespace maps" in line, line
        assert str(path) in line


def test_rootless_refuses_parents_others_may_write(
    rootless_setup, rootless_image_busybox, tmp_path
):
    parent = rootless_setup.config.parent
    os.chmod(parent, 0o775)
    try:
        result = _refused(rootless_setup, rootless_image_busybox)
    finally:
        os.chmod(parent, 0o755)
    line = ocihook_lines(result.stderr)[0]
    assert f"parent {parent} is writable by group or others (mode 0775)" in line
    profiles = rootless_setup.dir / "profiles"
    os.chown(profiles, rootless_setup.user.uid, rootless_setup.user.gid)
    try:
        result = _refused(rootless_setup, rootless_image_busybox)
    finally:
        os.chown(profiles, 0, 0)
    line = ocihook_lines(result.stderr)[0]
    assert f"profile {profiles}/synthetic.yaml: rootless: parent {profiles} is owned by" in line


def test_rootless_accepts_a_config_of_an_unmapped_owner(rootless_setup, rootless_image_rhel):
    """Host root is not the only owner outside the namespace: any uid it does not map counts
    (the rule cannot tell them apart; docs/security.md)."""
    outside = _unmapped_uid()
    os.chown(rootless_setup.config, outside, 0)
    try:
        result = rootless_setup.run(rootless_image_rhel, [SMI, "/dev/synth0"], devices="0")
    finally:
        os.chown(rootless_setup.config, 0, 0)
    assert result.returncode == 0, result.stderr
    assert synthetic.opened("synth0") in result.stdout


def test_root_podman_still_refuses_a_config_root_does_not_own(hook_setup, image_busybox):
    """The rootless rule is the rootless hook's only: as host root, the hook wants root's."""
    os.chown(hook_setup.config, _unmapped_uid(), 0)
    result = hook_setup.run(image_busybox, ["/bin/true"], "all")
    assert result.returncode != 0
    assert "must be owned by root and not writable by group or others" in result.stderr


def _subordinate_start(user: rootless.User) -> int:
    for name, first, _count in rootless._ranges("/etc/subuid"):
        if name == user.name:
            return first
    raise AssertionError(f"{user.name} has no /etc/subuid range")


def _unmapped_uid() -> int:
    """A uid no test user's namespace maps and no account has (above every subuid range)."""
    ends = [first + count for _n, first, count in rootless._ranges("/etc/subuid")]
    return max([200000, *ends]) + 1000


def test_rootless_trust_rule_inside_the_namespace(rootless_setup, tmp_path):
    """rootless.trust_problem and check_runtime_dir run where the hook does: in the user's
    namespace (podman unshare), on files whose real owners root set here."""
    base = rootless_setup.dir / "trust"
    base.mkdir(mode=0o755)
    try:
        files = {"root": (0, 0o644), "user": (rootless_setup.user.uid, 0o644)}
        files["outside"] = (_unmapped_uid(), 0o644)
        files["subuid"] = (_subordinate_start(rootless_setup.user) + 65533, 0o444)
        files["group-writable"] = (0, 0o664)
        for name, (uid, mode) in files.items():
            path = base / name
            path.write_text("profile: synthetic\n")
            os.chown(path, uid, 0)
            os.chmod(path, mode)
        script = (
            "import json, os, sys\n"
            f"sys.path.insert(0, {str(rootless_setup.dir / 'pkg')!r})\n"
            "from ocihook.linux import userns\n"
            "from ocihook.request import rootless\n"
            "ns = userns.detect_namespace()\n"
            f"names = {sorted(files)!r}\n"
            f"base = {str(base)!r}\n"
            "out = {n: rootless.trust_problem(ns, f'{base}/{n}', os.stat(f'{base}/{n}'))"
            " for n in names}\n"
            "out['ns'] = [ns.rootless, ns.host_uid]\n"
            "print(json.dumps(out))\n"
        )
        result = rootless_setup.user.unshare(rootless.HOOK_PYTHON, "-I", "-c", script)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True)
    assert out["ns"] == [True, rootless_setup.user.uid]
    assert out["root"] is None
    assert out["outside"] is None
    assert "owned by uid 0, host uid" in out["user"]
    assert "owned by a uid the user namespace maps" in out["subuid"]
    assert "writable by group or others (mode 0664)" in out["group-writable"]


def test_rootless_runtime_dir_must_be_the_users(rootless_setup, tmp_path):
    """check_runtime_dir in the user's namespace against runtime roots laid out here: the
    user's 0700 dir passes; missing, another owner's, or group-writable fail with one line
    naming it and the CDI route."""
    user = rootless_setup.user
    base = rootless_setup.dir / "runtime"
    cases = {"good": (user.uid, 0o700), "others": (0, 0o700), "wide": (user.uid, 0o770)}
    out = {}
    try:
        for case, (uid, mode) in cases.items():
            path = base / case / str(user.uid)
            path.mkdir(parents=True)
            os.chown(path, uid, user.gid)
            os.chmod(path, mode)
        (base / "missing").mkdir()
        rootless.write_tree(base)
        for case, (uid, mode) in cases.items():
            path = base / case / str(user.uid)
            os.chown(path, uid, user.gid)
            os.chmod(path, mode)
        script = (
            "import sys\n"
            f"sys.path.insert(0, {str(rootless_setup.dir / 'pkg')!r})\n"
            "from ocihook.linux import userns\n"
            "from ocihook.request import rootless\n"
            "from ocihook.errors import OcihookError\n"
            "ns = userns.detect_namespace()\n"
            f"for case in {[*cases, 'missing']!r}:\n"
            "    try:\n"
            f"        rootless.check_runtime_dir(ns, {str(base)!r} + '/' + case)\n"
            "        print(case, 'ok')\n"
            "    except OcihookError as error:\n"
            "        print(case, error)\n"
        )
        result = user.unshare(rootless.HOOK_PYTHON, "-I", "-c", script)
        assert result.returncode == 0, result.stderr
        for line in result.stdout.splitlines():
            case, _, message = line.partition(" ")
            out[case] = message
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True)
    assert out["good"] == "ok"
    assert "is not the user's" in out["others"] and CDI_ROUTE in out["others"]
    assert "writable by group or others (mode 0770)" in out["wide"]
    assert "does not exist" in out["missing"] and "loginctl enable-linger" in out["missing"]
