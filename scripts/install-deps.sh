#!/bin/sh
# Installs the Debian packages that the demo, the tests, the RPM build and the enforcing
# guest (qemu, mmdebstrap: make test-enforcing) need. The CRI-O tier runs ../shared/tools/crio
# (built from source: not a Debian package) with Debian's conmon, runc and CNI plugins; that
# crio links libsqlite3. dbus-daemon and gdbus (libglib2.0-bin): the other peers of the D-Bus
# client's tests (tests/test_dbuswire.py). The kube tier (tests/test_e2e_kube.py) runs
# ../shared/tools/kubernetes's cluster, which needs openssl, curl and Debian's etcd-server
# used as a binary: unpacked into ETCD_DIR, never installed (that would start a system etcd).
# Idempotent: does nothing when every package is already installed.
set -eu
PKGS="podman runc uidmap slirp4netns fuse-overlayfs busybox-static gcc make libc6-dev
selinux-policy-default selinux-policy-dev selinux-policy-src checkpolicy semodule-utils
policycoreutils setools python3-selinux python3-setools python3-sepolgen python3-venv
python3-dev rpm rpmlint zstd attr cpio
python3-click python3-yaml python3-jsonschema python3-pip python3-setuptools python3-wheel
qemu-system-x86 mmdebstrap e2fsprogs git
conmon containernetworking-plugins libsqlite3-0
zsh dbus-daemon dbus-bin libglib2.0-bin
openssl curl xz-utils"
ETCD_DIR=${ETCD_DIR:-/var/cache/ocihook-tests/etcd-server}
# shellcheck disable=SC2086
if dpkg-query -W -f='${Status}\n' $PKGS 2>/dev/null | grep -qv 'install ok installed' \
   || [ "$(dpkg-query -W -f='${Status}\n' $PKGS 2>/dev/null | wc -l)" -ne "$(echo $PKGS | wc -w)" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: run as root to install: $PKGS" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
fi
if [ ! -x "$ETCD_DIR/usr/bin/etcd" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: run as root to unpack etcd-server into $ETCD_DIR" >&2
        exit 1
    fi
    work=$(mktemp -d)
    (cd "$work" && apt-get download -q etcd-server >/dev/null 2>&1) \
        || { apt-get update -qq && (cd "$work" && apt-get download -q etcd-server >/dev/null); }
    mkdir -p "$ETCD_DIR"
    dpkg-deb -x "$work"/etcd-server_*.deb "$ETCD_DIR"
    rm -rf "$work"
fi
