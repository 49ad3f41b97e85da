#!/bin/sh
# Build the enforcing guest's disk image: Debian 12 from Debian packages, SELinux labelled.
#   tests/enforcing/image.sh OUTDIR
# Writes OUTDIR/{rootfs.img,vmlinuz,initrd.img}. Offline apart from the package mirror, which is
# taken from this host's apt configuration (never named here). Needs root, mmdebstrap, setfiles,
# mkfs.ext4. The image carries refpolicy's `container` module (Debian's built policy lacks it)
# and one local rule, both installed here so every boot is fast; the product itself is NOT in
# the image: the guest installs it from the worktree at every run (tests/enforcing/guest.sh).
set -eu
OUT=$1
HERE=$(cd "$(dirname "$0")" && pwd)
PKGS="linux-image-amd64 systemd-sysv udev kmod selinux-basics selinux-policy-default auditd
policycoreutils podman runc conmon busybox-static python3 python3-click python3-yaml
python3-jsonschema python3-selinux python3-setools python3-sepolgen python3-pip
python3-setuptools python3-wheel selinux-policy-dev selinux-policy-src checkpolicy semodule-utils gcc
libc6-dev make zstd attr"

# The host's apt sources, as they are (deb822 .sources or one-line .list files).
MIRRORS=""
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$f" ] && grep -q '^[^#]' "$f" && MIRRORS="$MIRRORS $f"
done
[ -n "$MIRRORS" ] || { echo "image.sh: no apt sources on this host" >&2; exit 1; }

WORK="$OUT.tmp"
rm -rf "$WORK"
mkdir -p "$WORK"
ROOT="$WORK/root"

# shellcheck disable=SC2086
mmdebstrap --mode=root --variant=apt --include="$(echo $PKGS | tr ' ' ,)" \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --customize-hook="cp -r '$HERE/image' \"\$1/tmp/ocihook-image\"" \
    --customize-hook='chroot "$1" sh /tmp/ocihook-image/customize.sh' \
    --customize-hook='rm -rf "$1/tmp/ocihook-image"' \
    bookworm "$ROOT" $MIRRORS

cp -L "$ROOT/vmlinuz" "$WORK/vmlinuz"
cp -L "$ROOT/initrd.img" "$WORK/initrd.img"

# Label from the host with the guest policy's file_contexts (this host runs no SELinux).
POL=$(ls "$ROOT"/etc/selinux/default/policy/policy.* | tail -1)
setfiles -r "$ROOT" -c "$POL" "$ROOT/etc/selinux/default/contexts/files/file_contexts" "$ROOT"
# systemd runs the check runner in unconfined_t (init_system_domain(unconfined_t, unconfined_exec_t)).
setfattr -n security.selinux -v system_u:object_r:unconfined_exec_t:s0 \
    "$ROOT/usr/local/sbin/ocihook-guest-run"

mkfs.ext4 -q -L root -d "$ROOT" "$WORK/rootfs.img" 6G
rm -rf "$ROOT"
rm -rf "$OUT"
mv "$WORK" "$OUT"
