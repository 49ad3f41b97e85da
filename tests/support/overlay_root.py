"""The installed tree put over the host's, for the install and RPM tests: a shell script
run in a private mount namespace (`unshare --mount --propagation private -- sh -c SCRIPT
NAME COMMAND...`), so that the host's mounts never change.

The scratch root's /usr and /etc lie over the host's (overlays, scratch first; /usr
read-only, /etc with a scratch upper dir for podman's lock files), the test config ($CONFIG)
replaces /etc/ocihook/config.yaml, and a tmpfs on /run/ocihook takes the hook's config
cache. Environment: ROOT (the installed tree), CONFIG, SCRATCH (a scratch dir), and
whatever `usr_lowers` names.
"""

from __future__ import annotations


def namespace_script(tag: str, usr_lowers: str, then: str = 'exec "$@"') -> str:
    """The script: mounts named `tag`-usr, -etc, -run; /usr from `usr_lowers` (overlay lower
    dirs, the host's /usr last); it prints the module and command it finds, then runs
    `then` (by default the command given after the script's name)."""
    return f"""
set -eu
mount -t overlay {tag}-usr -o "lowerdir={usr_lowers}:/usr" /usr
mkdir "$SCRATCH/etc-upper" "$SCRATCH/etc-work"
mount -t overlay {tag}-etc \\
    -o "lowerdir=$ROOT/etc:/etc,upperdir=$SCRATCH/etc-upper,workdir=$SCRATCH/etc-work" /etc
mount --bind "$CONFIG" /etc/ocihook/config.yaml
mount -t tmpfs -o mode=0700 {tag}-run /run/ocihook
echo "module: $(/usr/bin/python3 -I -c 'import ocihook; print(ocihook.__file__)')"
echo "command: $(ocihook --version)"
{then.strip()}
"""
