#!/bin/sh
# In a test guest (started by the image's boot-time runner):
#   guest.sh SRC OUT
# Enforcing guests (unconfined_t): installs the product from the worktree SRC the README's way
# (install.sh) and runs the checks (guest_checks.py) at level s0, as a root shell on a real host
# would run podman (see docs/selinux.md). The today's-stack guest (no SELinux) runs
# today_checks.py. Either leaves summary.json (and audit.log) in OUT.
set -u
SRC=$1
OUT=$2
cd "$SRC"
if grep -q '"policy": "today"' enforcing-options.json; then
    echo "== $(date +%T) today's stack: $(uname -r)"
    python3 tests/enforcing/today_checks.py "$SRC" "$OUT"
    rc=$?
    journalctl -b --no-pager > "$OUT/journal.log" 2>/dev/null
    echo "== $(date +%T) checks rc=$rc"
    exit $rc
fi
echo "== $(date +%T) enforce=$(cat /sys/fs/selinux/enforce) context=$(cat /proc/self/attr/current)"
runcon -l s0 python3 tests/enforcing/guest_checks.py "$SRC" "$OUT"
rc=$?
cp /var/log/audit/audit.log "$OUT/audit.log" 2>/dev/null
journalctl -b --no-pager > "$OUT/journal.log" 2>/dev/null
echo "== $(date +%T) checks rc=$rc"
exit $rc
