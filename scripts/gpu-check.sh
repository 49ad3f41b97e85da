#!/bin/sh
# Check ocihook's NVIDIA device names (GPU UUIDs, PCI addresses, MIG devices) on a real
# NVIDIA GPU machine, in one go (issue 26). Run as root from the repository root:
#
#     scripts/gpu-check.sh [OUT_DIR]          # default: $OUT if set, else ./gpu-check-out
#
# What it does (scripts/gpu_check.py says more): lists the host's GPUs, UUIDs and MIG state
# (nvidia-smi queries, the driver's proc files), asks ocihook's sandboxed NVML child,
# plans every request form, and applies plans into a chroot in a private mount namespace
# where `nvidia-smi -L` must list exactly the requested device. It never changes the MIG
# configuration (no `nvidia-smi mig`, no `-mig`): MIG is tested only if already enabled.
#
# Needs: python3 >= 3.9 with PyYAML and jsonschema (cloud images have both, for
# cloud-init); where they are missing, `make gpu-check-site` on a machine with PyPI access
# writes pure-Python copies to build/gpu-check/site, which this script puts on the path
# (bring that directory along: it is not in git). From a session with a lent GPU machine:
#     make gpu-check-site; run(command="scripts/gpu-check.sh $OUT", carry=["build/gpu-check/site"])
set -u
cd "$(dirname "$0")/.." || exit 2
out=${1:-${OUT:-gpu-check-out}}
mkdir -p "$out"
[ "$(id -u)" = 0 ] || { echo "gpu-check: run as root" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi on PATH" >&2; exit 2; }
PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
[ -d build/gpu-check/site ] && PYTHONPATH=$PYTHONPATH:$(pwd)/build/gpu-check/site
export PYTHONPATH
python3 -c 'import sys, yaml, jsonschema; assert sys.version_info >= (3, 9)' 2>"$out/python.txt" || {
    echo "gpu-check: python3 >= 3.9 with yaml and jsonschema needed ($(cat "$out/python.txt" | tail -1))" >&2
    exit 2
}
{
    echo "== $(date -u) $(uname -r) $(python3 --version)"
    nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,mig.mode.current,driver_version --format=csv
    nvidia-smi -L
} 2>&1 | tee "$out/host.txt"
timeout 900 python3 scripts/gpu_check.py --out "$out" 2>&1 | tee "$out/gpu-check.log"
exit "$(tail -1 "$out/gpu-check.log" | grep -q ', 0 failed' && echo 0 || echo 1)"
