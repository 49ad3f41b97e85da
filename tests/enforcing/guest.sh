#!/bin/sh
# In the enforcing guest (started by the image's boot-time runner, in unconfined_t):
#   guest.sh SRC OUT
# installs the product from the worktree SRC the README's way (install.sh), then runs the
# checks (guest_checks.py) at level s0, as a root shell on a real host would run podman
# (see docs/selinux.md), and leaves summary.json and audit.log in OUT.
set -u
SRC=$1
OUT=$2
cd "$SRC"
echo "== $(date +%T) enforce=$(cat /sys/fs/selinux/enforce) context=$(cat /proc/self/attr/current)"
runcon -l s0 python3 tests/enforcing/guest_checks.py "$SRC" "$OUT"
rc=$?
cp /var/log/audit/audit.log "$OUT/audit.log" 2>/dev/null
journalctl -b --no-pager > "$OUT/journal.log" 2>/dev/null
echo "== $(date +%T) checks rc=$rc"
exit $rc
