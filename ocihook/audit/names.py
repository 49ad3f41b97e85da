"""The SELinux names the audit reads: they live in ocihook/selinux/names.py (one home)."""

from __future__ import annotations

from ocihook.selinux.names import (  # noqa: F401  (re-exported for the audit modules)
    CONTAINER_FILE_TYPES,
    CONTAINER_RO_TYPES,
    DEVICE_CLASSES,
    DEVICE_TYPE,
    FILE_CLASSES,
    HOST_LIBRARY_TYPES,
    MODULE_NAME,
    MODULE_PACKAGE,
    RELABEL_COMMAND,
    SHARED_FILE_LABEL,
    VENDOR_DEVICE_TYPES,
    VENDOR_DEVICES_TUNABLE,
)

# A denied file of one of these types is labelled as `ocihook selinux relabel` labels driver
# sources: the denial has another cause. Any other type (usr_t, var_lib_t, and also lib_t:
# the base policies grant lib_t to containers, so a denial on it shows this host's policy
# does not) is fixed by relabelling the source.
CONTAINER_READABLE_TYPES = CONTAINER_RO_TYPES | CONTAINER_FILE_TYPES
