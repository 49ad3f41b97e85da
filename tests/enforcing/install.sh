#!/bin/sh
# The README's by-hand install ("Installing on a host"), as a user on a Debian host runs it:
#   install.sh SRC
# Debian's Python is externally managed (PEP 668): the dependencies come from Debian packages
# (python3-click python3-yaml python3-jsonschema python3-prctl python3-selinux) and pip installs
# only ocihook itself, into /usr/local (--break-system-packages is what PEP 668 asks for that).
set -eu
cd "$1"
python3 -m pip install -q --no-deps --no-build-isolation --no-index --break-system-packages .
install -D -m 0755 packaging/ocihook-hook /usr/libexec/ocihook/ocihook-hook
install -D -m 0644 hooks.d/ocihook.json /usr/share/containers/oci/hooks.d/ocihook.json
install -D -m 0644 packaging/config.yaml /etc/ocihook/config.yaml
install -d /usr/share/ocihook/profiles
install -m 0644 packaging/profiles/*.yaml /usr/share/ocihook/profiles/
# The policy module: build, semodule -i, restorecon of the default paths.
make -s -C selinux install
# Files copied by hand keep the label of where they came from: give them their default labels
# (an RPM does this itself).
restorecon -R /usr/libexec/ocihook /usr/share/containers/oci/hooks.d /etc/ocihook \
    /usr/share/ocihook /usr/local/bin/ocihook /usr/local/lib
