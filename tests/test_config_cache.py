"""The compiled config cache under races, tampering and corruption: keys from the fstat of
what was read, the trust rule on every run, a trusted cache dir and file, a validated cache
value (rebuilt when wrong, never an internal error), atomic writes."""

from __future__ import annotations

import json
import marshal
import os
import stat
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
import yaml

from ocihook.config import compiled as cfg
from ocihook.config.compiled import CACHE_MAGIC, compile_config, load_config
from ocihook.linux import trusted
from tests.conftest import PROFILES, base_config

NOBODY = 65534
STATE = json.dumps(
    {
        "ociVersion": "1.0.2",
        "id": "cachetest",
        "status": "creating",
        "bundle": "/nonexistent",
        "annotations": {},
    }
).encode()


def write(path: Path, document: dict) -> None:
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o644)


def hook(hook_setup, cache_dir: Path | None = None) -> subprocess.CompletedProcess:
    """The installed-style hook on the no-request path (the state has no annotations)."""
    return subprocess.run(
        [str(hook_setup.hook), "--config", str(hook_setup.config)]
        + ["--cache-dir", str(cache_dir or hook_setup.cache_dir)],
        input=STATE,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
    )


def cache_file(cache_dir: Path) -> Path:
    (path,) = cache_dir.glob("*.marshal")
    return path


def settle(path: Path) -> None:
    """Age the file's ctime past the racy window (a file changed within it is not cached)."""
    time.sleep(max(0.0, trusted.RACY_SECONDS - (time.time() - path.stat().st_ctime)) + 0.05)


@pytest.fixture
def warm(hook_setup) -> Path:
    """A config whose cache is written (the file is older than the racy window)."""
    settle(hook_setup.config)
    result = hook(hook_setup)
    assert result.returncode == 0, result.stderr
    return cache_file(hook_setup.cache_dir)


def test_cache_dir_and_file_are_root_only_and_parents_not_0755(hook_setup, tmp_path):
    cache_dir = tmp_path / "run" / "ocihook" / "cache"
    settle(hook_setup.config)
    assert hook(hook_setup, cache_dir).returncode == 0
    for directory in (tmp_path / "run", tmp_path / "run/ocihook", cache_dir):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert stat.S_IMODE(cache_file(cache_dir).stat().st_mode) == 0o600
    assert [p.name for p in cache_dir.iterdir()] == [cache_file(cache_dir).name]


def test_a_racy_config_is_not_cached(hook_setup):
    """A config changed in the clock tick of the read (here: just now) is not cached."""
    hook_setup.config.write_text(hook_setup.config.read_text())
    load_config(str(hook_setup.config), str(hook_setup.cache_dir))
    assert list(hook_setup.cache_dir.glob("*.marshal")) == []
    settle(hook_setup.config)
    load_config(str(hook_setup.config), str(hook_setup.cache_dir))
    assert len(list(hook_setup.cache_dir.glob("*.marshal"))) == 1


def test_fresh_cache_is_used_without_yaml(hook_setup, warm):
    code = (
        "import sys; from ocihook.config.compiled import load_config; "
        f"c = load_config({str(hook_setup.config)!r}, {str(hook_setup.cache_dir)!r}); "
        "print(c['profile']['name'], 'yaml' in sys.modules, 'jsonschema' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["synthetic", "False", "False"], out.stderr


@pytest.mark.parametrize("change", ["chmod g+w", "chmod o+w", "chown nobody"])
@pytest.mark.parametrize("which", ["config", "profile"])
def test_trust_rule_applies_while_the_cache_is_fresh(
    hook_setup, synth_root, tmp_path, change, which
):
    profile = tmp_path / "profiles" / "synthetic.yaml"
    profile.parent.mkdir()
    profile.write_text((PROFILES / "synthetic.yaml").read_text())
    profile.chmod(0o644)
    write(
        hook_setup.config,
        base_config(hook_setup.dir, synth_root, profile_dirs=[str(profile.parent)]),
    )
    settle(hook_setup.config)
    settle(profile)
    assert hook(hook_setup).returncode == 0
    cached = cache_file(hook_setup.cache_dir).read_bytes()
    target = hook_setup.config if which == "config" else profile
    if change == "chown nobody":
        os.chown(target, NOBODY, -1)
    else:
        target.chmod(0o664 if change == "chmod g+w" else 0o646)
    result = hook(hook_setup)
    assert result.returncode == 1
    assert result.stderr.decode() == (
        f"ocihook: {which} {target}: must be owned by root and not writable by group or others\n"
    )
    assert cache_file(hook_setup.cache_dir).read_bytes() == cached  # the cache itself was fresh


def _valid_cache(files: list, config: object) -> bytes:
    body = marshal.dumps(
        {
            "format": cfg.CACHE_FORMAT,
            "version": cfg.__version__,
            "python": sys.hexversion,
            "files": files,
            "config": config,
        }
    )
    return CACHE_MAGIC + b"%08x" % zlib.crc32(body) + body


def _bad_contents(warm: Path) -> dict[str, bytes]:
    good = warm.read_bytes()
    cached = marshal.loads(good[len(CACHE_MAGIC) + 8 :])
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x04
    wrong_config = dict(cached["config"])
    del wrong_config["profile"]
    return {
        "old format (plain marshal)": marshal.dumps({"files": {}, "config": []}),
        "bit flipped": bytes(flipped),
        "truncated": good[: len(good) // 2],
        "empty": b"",
        "config is a list": _valid_cache(cached["files"], ["not", "a", "config"]),
        "config lacks a key": _valid_cache(cached["files"], wrong_config),
        "files of the wrong shape": _valid_cache({"x": 1}, cached["config"]),
        "garbage": os.urandom(4096),
    }


@pytest.mark.parametrize(
    "case",
    [
        "old format (plain marshal)",
        "bit flipped",
        "truncated",
        "empty",
        "config is a list",
        "config lacks a key",
        "files of the wrong shape",
        "garbage",
    ],
)
def test_a_bad_cache_is_rebuilt_never_an_internal_error(hook_setup, warm, case):
    good = warm.read_bytes()
    warm.write_bytes(_bad_contents(warm)[case])
    result = hook(hook_setup)
    assert (result.returncode, result.stderr) == (0, b"")
    assert warm.read_bytes() == good


def test_untrusted_cache_file_is_ignored_and_rebuilt(hook_setup, warm, synth_root):
    """A cache file that is not root's 0600 is not read, even when it looks valid."""
    good = warm.read_bytes()
    cached = marshal.loads(good[len(CACHE_MAGIC) + 8 :])
    planted = dict(cached["config"], source_root="/planted")
    for mode, owner in ((0o644, 0), (0o600, NOBODY)):
        warm.write_bytes(_valid_cache(cached["files"], planted))
        warm.chmod(mode)
        os.chown(warm, owner, -1)
        config = load_config(str(hook_setup.config), str(hook_setup.cache_dir))
        assert config["source_root"] == str(synth_root)
        assert warm.read_bytes() == good
        assert stat.S_IMODE(warm.stat().st_mode) == 0o600 and warm.stat().st_uid == 0


def test_a_widened_cache_dir_is_tightened_and_emptied(hook_setup, warm, synth_root):
    cached = marshal.loads(warm.read_bytes()[len(CACHE_MAGIC) + 8 :])
    warm.write_bytes(_valid_cache(cached["files"], dict(cached["config"], source_root="/x")))
    hook_setup.cache_dir.chmod(0o777)
    config = load_config(str(hook_setup.config), str(hook_setup.cache_dir))
    assert config["source_root"] == str(synth_root)
    assert stat.S_IMODE(hook_setup.cache_dir.stat().st_mode) == 0o700
    assert marshal.loads(warm.read_bytes()[len(CACHE_MAGIC) + 8 :])["config"] == config


def test_a_cache_dir_not_owned_by_root_is_not_used(hook_setup, warm, synth_root):
    cached = marshal.loads(warm.read_bytes()[len(CACHE_MAGIC) + 8 :])
    planted = _valid_cache(cached["files"], dict(cached["config"], source_root="/x"))
    warm.write_bytes(planted)
    os.chown(hook_setup.cache_dir, NOBODY, -1)
    config = load_config(str(hook_setup.config), str(hook_setup.cache_dir))
    assert config["source_root"] == str(synth_root)
    assert warm.read_bytes() == planted  # neither read nor written
    result = hook(hook_setup)
    assert (result.returncode, result.stderr) == (0, b"")


def test_a_profile_added_to_an_earlier_dir_is_used(hook_setup, synth_root, tmp_path):
    early, late = tmp_path / "early", tmp_path / "late"
    early.mkdir()
    late.mkdir()
    text = (PROFILES / "synthetic.yaml").read_text()
    (late / "synthetic.yaml").write_text(text)
    (late / "synthetic.yaml").chmod(0o644)
    write(
        hook_setup.config,
        base_config(hook_setup.dir, synth_root, profile_dirs=[str(early), str(late)]),
    )
    settle(hook_setup.config)
    settle(late / "synthetic.yaml")
    config = load_config(str(hook_setup.config), str(hook_setup.cache_dir))
    assert config["profile"]["description"] != "EARLY"
    cache_file(hook_setup.cache_dir)
    document = yaml.safe_load(text)
    document["description"] = "EARLY"
    write(early / "synthetic.yaml", document)
    config = load_config(str(hook_setup.config), str(hook_setup.cache_dir))
    assert config["profile"]["description"] == "EARLY"
    assert config == compile_config(str(hook_setup.config))[0]


def test_allow_regexes_are_compiled_with_the_config(hook_setup, synth_root):
    bad = {"allow": [{"annotations": {"(": ".*"}, "devices": "all"}]}
    write(hook_setup.config, base_config(hook_setup.dir, synth_root, request=bad))
    result = hook(hook_setup)
    assert result.returncode == 1
    assert result.stderr.decode().startswith(
        f"ocihook: config {hook_setup.config}: request.allow.0.annotations: invalid regex '(': "
    )


WORKER = """
import sys
from ocihook.config.compiled import load_config
config, cache = sys.argv[1], sys.argv[2]
while True:
    try:
        load_config(config, cache)
    except Exception as error:  # a torn read mid-edit is fine; a crash is reported
        if type(error).__name__ != "OcihookError":
            print("CRASH", type(error).__name__, error, flush=True)
"""


def test_edits_during_compiles_leave_no_stale_cache(hook_setup, synth_root, tmp_path):
    """Four processes compile and cache the config while it is edited in place and by
    atomic rename, alternating values of the same size; when the edits stop, what the cache
    serves is what the file says, at once and after the racy window."""
    variants = [base_config(hook_setup.dir, synth_root, device_root=f"/dev{n}") for n in range(10)]
    texts = [yaml.safe_dump(v) for v in variants]
    assert len({len(t) for t in texts}) == 1  # same size: only times and inode tell them apart
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(hook_setup.config), str(hook_setup.cache_dir)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        deadline = time.monotonic() + 6
        n = 0
        while time.monotonic() < deadline:
            text = texts[n % len(texts)]
            if n % 2:
                with open(hook_setup.config, "r+") as file:  # in place, same size
                    file.write(text)
            else:
                tmp = tmp_path / "config.new"
                tmp.write_text(text)
                tmp.chmod(0o644)
                os.replace(tmp, hook_setup.config)
            n += 1
            time.sleep(0.002 * (n % 7))
    finally:
        for worker in workers:
            worker.kill()
        outputs = [worker.communicate()[0] for worker in workers]
    assert not any("CRASH" in out for out in outputs), outputs
    final = yaml.safe_load(hook_setup.config.read_text())["device_root"]
    assert load_config(str(hook_setup.config), str(hook_setup.cache_dir))["device_root"] == final
    settle(hook_setup.config)
    for _ in range(2):  # the first writes the cache, the second reads it
        assert (
            load_config(str(hook_setup.config), str(hook_setup.cache_dir))["device_root"] == final
        )
    cached = marshal.loads(cache_file(hook_setup.cache_dir).read_bytes()[len(CACHE_MAGIC) + 8 :])
    assert cached["config"]["device_root"] == final
    assert n > 200


def test_cache_write_on_a_full_disk_leaves_no_temp_file(hook_setup, tmp_path):
    cache_dir = tmp_path / "full"
    cache_dir.mkdir(mode=0o700)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4k,mode=0700", "i12full", str(cache_dir)], check=True
    )
    try:
        (cache_dir / "filler").write_bytes(b"x" * 4096)
        settle(hook_setup.config)
        result = hook(hook_setup, cache_dir)
        assert (result.returncode, result.stderr) == (0, b"")  # a cache only costs speed
        assert sorted(p.name for p in cache_dir.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", str(cache_dir)], check=True)
