"""A stand-in for an SELinux host's podman: the hook sees a config.json with linux.mountLabel.

No SELinux LSM runs on the test machines, so podman leaves linux.mountLabel out of the
OCI config, and runc refuses one it cannot apply. This wrapper (which hooks.d points at
in the label tests) copies the bundle's config.json with the label added, points the
state at the copy, and runs the real hook executable with it.
Usage: hook_with_label.py HOOK LABEL [hook args...]
"""

import json
import os
import sys
import tempfile

hook, label, *args = sys.argv[1:]
state = json.loads(sys.stdin.buffer.read())
with open(os.path.join(state["bundle"], "config.json")) as file:
    config = json.load(file)
config.setdefault("linux", {})["mountLabel"] = label
bundle = tempfile.mkdtemp(prefix="ocihook-label-bundle-")
with open(os.path.join(bundle, "config.json"), "w") as file:
    json.dump(config, file)
state["bundle"] = bundle
read, write = os.pipe()
os.write(write, json.dumps(state).encode())
os.close(write)
os.dup2(read, 0)
os.execv(hook, [hook, *args])
