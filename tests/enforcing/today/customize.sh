#!/bin/sh
# Runs inside the today's-stack image (chroot) at build time: the boot-time check runner,
# rootful podman's --userns=auto ranges, containerd's CRI (CDI on, a loopback-only CNI, the
# sandbox image a local one: the guest has no registry). No SELinux.
set -eu
HERE=/tmp/ocihook-today
echo '/dev/vda / ext4 rw,relatime 0 1' > /etc/fstab
echo today-guest > /etc/hostname

install -m 0755 "$HERE/ocihook-guest-run" /usr/local/sbin/ocihook-guest-run
install -m 0644 "$HERE/ocihook-guest.service" /etc/systemd/system/ocihook-guest.service
systemctl enable ocihook-guest.service

# podman run --userns=auto takes its ranges from the "containers" entries.
useradd --system --no-create-home --shell /usr/sbin/nologin containers
echo "containers:2147483647:2147483648" >> /etc/subuid
echo "containers:2147483647:2147483648" >> /etc/subgid

mkdir -p /etc/containerd /etc/cni/net.d
cat > /etc/containerd/config.toml <<'T'
version = 3
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "localhost/ocihook-pause:latest"
[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "/etc/cni/net.d"
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = true
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.crun]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.crun.options]
  BinaryName = "/usr/bin/crun"
  SystemdCgroup = true
T
echo '{"cniVersion": "1.0.0", "name": "loopback-only", "plugins": [{"type": "loopback"}]}' \
    > /etc/cni/net.d/10-loopback.conflist
echo 'runtime-endpoint: unix:///run/containerd/containerd.sock' > /etc/crictl.yaml

for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
    man-db.timer podman-auto-update.timer podman-restart.service getty@tty1.service \
    serial-getty@ttyS0.service getty.target; do
    systemctl mask "$unit" >/dev/null 2>&1 || true
done
