"""Names from the ocihook policy module and the container policies, kept in one place."""

from __future__ import annotations

MODULE_NAME = "ocihook"
MODULE_PACKAGE = "/usr/share/selinux/packages/ocihook.pp"
DEVICE_TYPE = "ocihook_device_t"
VENDOR_DEVICES_TUNABLE = "ocihook_use_vendor_devices"
# Host device types that the tunable lets container domains use as they are.
VENDOR_DEVICE_TYPES = frozenset({"xserver_misc_device_t", "dri_device_t", "hsa_device_t"})
# The label `ocihook selinux relabel` gives shared driver files.
SHARED_FILE_LABEL = "container_ro_file_t:s0"
RELABEL_COMMAND = "ocihook selinux relabel"
# File types every container domain may read (container-selinux and refpolicy).
CONTAINER_READABLE_TYPES = frozenset(
    {"container_ro_file_t", "container_file_t", "container_share_t", "svirt_sandbox_file_t"}
)
FILE_CLASSES = frozenset({"file", "dir", "lnk_file", "sock_file", "fifo_file"})
DEVICE_CLASSES = frozenset({"chr_file", "blk_file"})
