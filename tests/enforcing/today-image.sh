#!/bin/sh
# Build the today's-stack guest image: Debian's newest runtimes (podman 5.8, crun 1.28, runc
# 1.3, conmon 2.1, containerd 2.1, systemd 262, Python 3.14), systemd as PID 1, cgroup v2 only,
# no SELinux (the enforcing guests cover labels; this one covers the runtimes our users run).
#
#   today-image.sh ROOT OUT CRICTL
#
# OUT gets vmlinuz, initrd.img, rootfs-today.img and versions.txt (what the image holds, and
# from which suite and pins). CRICTL: a crictl binary for containerd's CRI (../shared/tools/
# crio/crictl; the guest has no network). Needs root, mmdebstrap, mkfs.ext4.
#
# Suites: sid first, pinned to the versions last measured (today-pins.txt); when a pinned
# version is gone from the mirror (sid moves), the same suite unpinned; when that fails or
# its crun is older than 1.23 (the BPFProgram= behaviour this tier exists for), the next
# suite (forky). The mirror is the one this host's apt sources name (never written here).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${1:?usage: today-image.sh ROOT OUT CRICTL}
OUT=${2:?usage: today-image.sh ROOT OUT CRICTL}
CRICTL=${3:?usage: today-image.sh ROOT OUT CRICTL}
SUITES=${TODAY_SUITES:-sid forky}
PKGS="linux-image-amd64 systemd-sysv udev kmod dbus passwd podman crun runc conmon containerd
containernetworking-plugins netavark passt busybox-static python3 python3-click python3-yaml
python3-jsonschema gcc libc6-dev make attr zstd iproute2 procps"

# The Debian mirror of this host's apt sources (deb822 URIs: or one-line deb), not security's.
MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | sed -n 's/^URIs:[[:space:]]*//p; s/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p' \
    | tr ' ' '\n' | grep '/debian/\?$' | grep -v security | head -1)
[ -n "$MIRROR" ] || { echo "today-image.sh: no Debian mirror in this host's apt sources" >&2; exit 1; }

build() {  # build SUITE PACKAGES...: mmdebstrap into ROOT
    rm -rf "$ROOT"
    mkdir -p "$(dirname "$ROOT")"
    suite=$1
    shift
    # shellcheck disable=SC2048,SC2086
    mmdebstrap --mode=root --variant=apt --include="$(echo $* | tr ' ' ,)" \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --customize-hook="cp -r '$HERE/today' \"\$1/tmp/ocihook-today\"" \
        --customize-hook="cp '$HERE/image/ocihook-guest-run' '$HERE/image/ocihook-guest.service' \"\$1/tmp/ocihook-today/\"" \
        --customize-hook="cp '$CRICTL' \"\$1/usr/local/bin/crictl\"" \
        --customize-hook='chroot "$1" sh /tmp/ocihook-today/customize.sh' \
        --customize-hook='rm -rf "$1/tmp/ocihook-today"' \
        "$suite" "$ROOT" "deb $MIRROR $suite main"
}

crun_ok() {  # crun in ROOT is 1.23 or later
    v=$(chroot "$ROOT" dpkg-query -W -f='${Version}' crun 2>/dev/null) || return 1
    dpkg --compare-versions "$v" ge 1.23
}

pinned=""
while read -r pkg version; do
    case $pkg in ''|'#'*) continue ;; esac
    pinned="$pinned $pkg=$version"
done < "$HERE/today-pins.txt"
used=""
for suite in $SUITES; do
    if [ "$suite" = sid ] && build sid $PKGS $pinned && crun_ok; then
        used="sid, pinned (today-pins.txt)"
        break
    fi
    if build "$suite" $PKGS && crun_ok; then
        used="$suite, unpinned"
        break
    fi
    echo "today-image.sh: $suite: no image with crun >= 1.23, trying the next suite" >&2
done
[ -n "$used" ] || { echo "today-image.sh: no suite of $SUITES gave crun >= 1.23" >&2; exit 1; }

mkdir -p "$OUT"
cp -L "$ROOT/vmlinuz" "$OUT/vmlinuz"
cp -L "$ROOT/initrd.img" "$OUT/initrd.img"
{
    echo "# suite: $used; mirror: $MIRROR; built $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    chroot "$ROOT" dpkg-query -W -f='${Package} ${Version}\n' linux-image-amd64 systemd podman \
        crun runc conmon containerd containernetworking-plugins python3 python3-click \
        python3-yaml python3-jsonschema
} > "$OUT/versions.txt"
rm -f "$OUT/rootfs-today.img.tmp"
mkfs.ext4 -q -L root -d "$ROOT" "$OUT/rootfs-today.img.tmp" 6G
mv "$OUT/rootfs-today.img.tmp" "$OUT/rootfs-today.img"
