#!/bin/sh
# The README's install ("Installing on a host"), as a user on a Debian host runs it:
#   install.sh SRC
# The Python dependencies are Debian packages in the image (python3-click python3-yaml
# python3-jsonschema python3-selinux); `make install` copies ocihook, the hook,
# hooks.d, config, profiles and the policy module, and loads the module (SELinux is enabled).
set -eu
cd "$1"
make install
# Files installed by hand are created with the labels of the directories they land in; give
# them their default labels, as an RPM does (README "SELinux").
restorecon -R /usr/lib/python3/dist-packages/ocihook /usr/bin/ocihook /usr/libexec/ocihook \
    /usr/share/containers/oci/hooks.d /etc/ocihook /usr/share/ocihook /run/ocihook
