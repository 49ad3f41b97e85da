"""SELinux names of the ocihook policy module and the container policies: the one home
(label, relabel, status, the hook's source check and the audit read them from here).

Kept stdlib-free and import-free: the hook imports it at container start.
"""

from __future__ import annotations

MODULE_NAME = "ocihook"
MODULE_PACKAGE = "/usr/share/selinux/packages/ocihook.pp"
DEVICE_TYPE = "ocihook_device_t"
VENDOR_DEVICES_TUNABLE = "ocihook_use_vendor_devices"
# Host device types that the tunable lets container domains use as they are.
VENDOR_DEVICE_TYPES = frozenset({"xserver_misc_device_t", "dri_device_t", "hsa_device_t"})
RELABEL_COMMAND = "ocihook selinux relabel"

# What `ocihook selinux relabel` gives shared driver files and device nodes.
SHARED_FILE_TYPE = "container_ro_file_t"
SHARED_FILE_LABEL = f"{SHARED_FILE_TYPE}:s0"
SHARED_FILE_CONTEXT = f"system_u:object_r:{SHARED_FILE_LABEL}"
DEVICE_CONTEXT = f"system_u:object_r:{DEVICE_TYPE}:s0"

# The container policies' own file types: container_ro_file_t (and container-selinux's
# aliases of it) for shared read-only content; container_file_t (and its aliases) read-write,
# but for every container only at s0 without categories.
CONTAINER_RO_TYPES = frozenset({SHARED_FILE_TYPE, "container_share_t", "docker_share_t"})
CONTAINER_FILE_TYPES = frozenset({"container_file_t", "svirt_lxc_file_t", "svirt_sandbox_file_t"})
# Host library types that every container domain may read, map and execute through
# libs_use_shared_libs(domain) in both base policies (container-selinux on Fedora/RHEL and
# refpolicy's container module on Debian; tests/test_selinux_policy.py checks it against the
# linked policy). The hook's source check accepts them. Other types (bin_t, usr_t) are
# accepted where the running policy says so (selinux/access.py asks the kernel).
HOST_LIBRARY_TYPES = frozenset({"lib_t", "ld_so_t", "textrel_shlib_t"})
# Types a bind-mount source may have for the hook (at a level without categories).
SHARED_READ_TYPES = CONTAINER_RO_TYPES | HOST_LIBRARY_TYPES

FILE_CLASSES = frozenset({"file", "dir", "lnk_file", "sock_file", "fifo_file"})
DEVICE_CLASSES = frozenset({"chr_file", "blk_file"})
