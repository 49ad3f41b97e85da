#!/bin/sh
# Runs inside the new image (chroot) at build time: SELinux config, refpolicy's container
# module and the test bed's one local rule, and the boot-time check runner.
set -eu
HERE=/tmp/ocihook-image

cat > /etc/selinux/config <<'CFG'
SELINUX=enforcing
SELINUXTYPE=default
CFG
echo '/dev/vda / ext4 rw,relatime 0 1' > /etc/fstab
echo enforcing-guest > /etc/hostname

# refpolicy's container module (Debian builds its policy without it; its .if is already in
# the devel headers) and the local rule.
mkdir -p /tmp/pol
tar -C /tmp/pol --zstd -xf /usr/src/selinux-policy-src.tar.zst \
    selinux-policy-src/policy/modules/services/container.te \
    selinux-policy-src/policy/modules/services/container.fc
cp /tmp/pol/selinux-policy-src/policy/modules/services/container.* /tmp/pol/
cp "$HERE/ocihooktestbed.te" /tmp/pol/
(cd /tmp/pol && make -s -f /usr/share/selinux/devel/Makefile container.pp ocihooktestbed.pp)
semodule -i /tmp/pol/container.pp /tmp/pol/ocihooktestbed.pp
rm -rf /tmp/pol

# podman's storage, created now so that the image's labelling (setfiles) gives it the container
# module's types (container_var_lib_t, container_ro_file_t for layers), as restorecon does on a
# host where the container policy is installed after podman; files podman creates later inherit.
mkdir -p /var/lib/containers/storage/overlay /var/lib/containers/storage/overlay-images \
    /var/lib/containers/storage/overlay-layers /var/lib/containers/storage/overlay-containers \
    /var/lib/containers/storage/volumes

install -m 0755 "$HERE/ocihook-guest-run" /usr/local/sbin/ocihook-guest-run
install -m 0644 "$HERE/ocihook-guest.service" /etc/systemd/system/ocihook-guest.service
systemctl enable ocihook-guest.service
# Nothing else to start: a faster boot.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
    man-db.timer podman-auto-update.timer podman-restart.service getty@tty1.service \
    serial-getty@ttyS0.service getty.target; do
    systemctl mask "$unit" >/dev/null 2>&1 || true
done
