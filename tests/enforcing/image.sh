#!/bin/sh
# Build the enforcing guests' disk images: Debian 12 from Debian packages, SELinux labelled.
#
#   image.sh base ROOT                  the root tree, from Debian packages (mmdebstrap)
#   image.sh refpolicy ROOT OUT         OUT/{vmlinuz,initrd.img,rootfs.img}: ROOT labelled with
#                                       Debian's policy and refpolicy's container module
#   image.sh fedora ROOT POLICY OUT     OUT/rootfs-fedora.img: ROOT with Fedora's targeted policy
#                                       38.1 and container-selinux from POLICY (the DEST of
#                                       ../shared/tools/sources/build-fedora-targeted.sh), relabelled
#
# tests/enforcing/vm.py runs them in that order (base while the Fedora policy builds); the
# fedora stage changes ROOT, so it comes after the refpolicy image is written. Offline apart
# from the package mirror, which is taken from this host's apt configuration (never named
# here). Needs root, mmdebstrap, setfiles, mkfs.ext4. The product itself is NOT in the images:
# the guest installs it at every run (tests/enforcing/guest.sh): with `make install` under
# refpolicy, from its RPMs with `rpm` under Fedora's policy.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
STAGE=${1:?usage: image.sh base|refpolicy|fedora ...}
ROOT=${2:?usage: image.sh $STAGE ROOT ...}
# crun: Fedora's and RHEL's default runtime, which reaches systemd over D-Bus (dbus: the system
# bus every RHEL host runs); rpm: installs the product's RPMs (fedora stage).
PKGS="linux-image-amd64 systemd-sysv udev kmod selinux-basics selinux-policy-default auditd
policycoreutils podman runc crun conmon busybox-static python3 python3-click python3-yaml
python3-jsonschema python3-selinux python3-setools python3-sepolgen python3-pip
python3-setuptools python3-wheel selinux-policy-dev selinux-policy-src checkpolicy semodule-utils
gcc libc6-dev make zstd attr rpm dbus"

label() {  # label ROOT POLICYNAME: every file of ROOT with POLICYNAME's file_contexts
    pol=$(ls "$1"/etc/selinux/"$2"/policy/policy.* | tail -1)
    setfiles -r "$1" -c "$pol" "$1/etc/selinux/$2/contexts/files/file_contexts" "$1"
}

mkfs() {  # mkfs ROOT IMAGE
    rm -f "$2.tmp"
    mkfs.ext4 -q -L root -d "$1" "$2.tmp" 6G
    mv "$2.tmp" "$2"
}

case $STAGE in
base)
    # The host's apt sources, as they are (deb822 .sources or one-line .list files).
    MIRRORS=""
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -s "$f" ] && grep -q '^[^#]' "$f" && MIRRORS="$MIRRORS $f"
    done
    [ -n "$MIRRORS" ] || { echo "image.sh: no apt sources on this host" >&2; exit 1; }
    rm -rf "$ROOT"
    mkdir -p "$(dirname "$ROOT")"
    # shellcheck disable=SC2086
    mmdebstrap --mode=root --variant=apt --include="$(echo $PKGS | tr ' ' ,)" \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --customize-hook="cp -r '$HERE/image' \"\$1/tmp/ocihook-image\"" \
        --customize-hook='chroot "$1" sh /tmp/ocihook-image/customize.sh' \
        --customize-hook='rm -rf "$1/tmp/ocihook-image"' \
        bookworm "$ROOT" $MIRRORS
    ;;
refpolicy)
    OUT=${3:?usage: image.sh refpolicy ROOT OUT}
    mkdir -p "$OUT"
    cp -L "$ROOT/vmlinuz" "$OUT/vmlinuz"
    cp -L "$ROOT/initrd.img" "$OUT/initrd.img"
    # Label from the host with the guest policy's file_contexts (this host runs no SELinux).
    label "$ROOT" default
    # systemd runs the check runner in unconfined_t
    # (refpolicy: init_system_domain(unconfined_t, unconfined_exec_t)).
    setfattr -n security.selinux -v system_u:object_r:unconfined_exec_t:s0 \
        "$ROOT/usr/local/sbin/ocihook-guest-run"
    mkfs "$ROOT" "$OUT/rootfs.img"
    ;;
fedora)
    POLICY=${3:?usage: image.sh fedora ROOT POLICY OUT}
    OUT=${4:?usage: image.sh fedora ROOT POLICY OUT}
    mkdir -p "$OUT"
    # What the selinux-policy-targeted, selinux-policy-devel and container-selinux RPMs put
    # on a RHEL 9 host: the policy, its module store, the devel headers (in place of Debian's
    # refpolicy headers) and container.pp; SELINUXTYPE=targeted.
    rm -rf "$ROOT/etc/selinux/targeted" "$ROOT/var/lib/selinux/targeted" "$ROOT/usr/share/selinux/devel"
    cp -a "$POLICY/etc/selinux/targeted" "$ROOT/etc/selinux/"
    cp -a "$POLICY/var/lib/selinux/targeted" "$ROOT/var/lib/selinux/"
    cp -a "$POLICY/usr/share/selinux/devel" "$ROOT/usr/share/selinux/devel"
    install -D -m 0644 "$POLICY/usr/share/selinux/packages/container.pp" \
        "$ROOT/usr/share/selinux/packages/container.pp"
    printf 'SELINUX=enforcing\nSELINUXTYPE=targeted\n' > "$ROOT/etc/selinux/config"
    # Fedora's rpm package owns this directory; %selinux_relabel_pre keeps file_contexts there.
    mkdir -p "$ROOT/var/lib/rpm-state"
    chroot "$ROOT" rpm --initdb
    # RHEL's /bin/sh is bash, and RPM scriptlets are written for it (the selinux-policy
    # macros use `&>`, which dash reads as "run in the background").
    ln -sf bash "$ROOT/usr/bin/sh"
    # Under Fedora's policy systemd would run the runner (bin_t) as unconfined_service_t;
    # the checks run as a root login shell does on RHEL, unconfined_u:unconfined_r:
    # unconfined_t (init_t may transition to a login user domain).
    mkdir -p "$ROOT/etc/systemd/system/ocihook-guest.service.d"
    printf '[Service]\nSELinuxContext=unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023\n' \
        > "$ROOT/etc/systemd/system/ocihook-guest.service.d/selinux.conf"
    label "$ROOT" targeted
    mkfs "$ROOT" "$OUT/rootfs-fedora.img"
    ;;
*)
    echo "image.sh: unknown stage $STAGE" >&2
    exit 2
    ;;
esac
