"""Validate hooks.d files the way containers/common's 1.0.0 reader does (podman, CRI-O)."""

from __future__ import annotations

import json
import os
import re

STAGES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
DEFAULT_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")


def _regex(pattern: object, where: str) -> list[str]:
    if not isinstance(pattern, str):
        return [f"{where}: must be a string"]
    try:
        re.compile(pattern)
    except re.error as error:
        return [f"{where}: invalid regular expression {pattern!r}: {error}"]
    return []


def check_hook_file(path: str) -> list[str]:
    """Problems with one hooks.d JSON file (empty list: podman and CRI-O accept it)."""
    try:
        with open(path, "rb") as file:
            document = json.loads(file.read())
    except OSError as error:
        return [f"{path}: {error.strerror}"]
    except ValueError as error:
        return [f"{path}: not valid JSON: {error}"]
    if not isinstance(document, dict):
        return [f"{path}: must be a JSON object"]
    problems = []
    if document.get("version") != "1.0.0":
        problems.append(f'{path}: version must be "1.0.0", not {document.get("version")!r}')
    hook = document.get("hook")
    if not isinstance(hook, dict):
        problems.append(f"{path}: hook: missing or not an object")
    else:
        problems += _check_hook(path, hook)
    when = document.get("when")
    if not isinstance(when, dict):
        problems.append(f"{path}: when: missing or not an object")
    else:
        problems += _check_when(path, when)
    stages = document.get("stages")
    if not isinstance(stages, list) or not stages:
        problems.append(f"{path}: stages: must be a non-empty array")
    else:
        problems += [f"{path}: stages: unknown stage {s!r}" for s in stages if s not in STAGES]
    return problems


def _check_hook(path: str, hook: dict) -> list[str]:
    problems = []
    exe = hook.get("path")
    if not isinstance(exe, str) or not exe:
        problems.append(f"{path}: hook.path: missing")
    elif not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        problems.append(f"{path}: hook.path: {exe} is not an executable file")
    for key in ("args", "env"):
        value = hook.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.append(f"{path}: hook.{key}: must be an array of strings")
    if "env" not in hook:
        problems.append(f"{path}: hook.env: missing (ocihook expects an explicit environment)")
    timeout = hook.get("timeout")
    if timeout is not None and (not isinstance(timeout, int) or timeout < 1):
        problems.append(f"{path}: hook.timeout: must be a positive integer")
    return problems


def _check_when(path: str, when: dict) -> list[str]:
    problems = []
    known = {"always", "annotations", "commands", "hasBindMounts"}
    problems += [f"{path}: when: unknown key {k!r}" for k in when if k not in known]
    if not any(when.get(k) for k in known):
        problems.append(f"{path}: when: no conditions (the reader rejects an empty 'when')")
    annotations = when.get("annotations", {})
    if not isinstance(annotations, dict):
        problems.append(f"{path}: when.annotations: must be an object")
    else:
        for key, value in annotations.items():
            problems += _regex(key, f"{path}: when.annotations key")
            problems += _regex(value, f"{path}: when.annotations[{key!r}]")
    commands = when.get("commands", [])
    if not isinstance(commands, list):
        problems.append(f"{path}: when.commands: must be an array")
    else:
        for command in commands:
            problems += _regex(command, f"{path}: when.commands")
    for key in ("always", "hasBindMounts"):
        if key in when and not isinstance(when[key], bool):
            problems.append(f"{path}: when.{key}: must be true or false")
    return problems


def ocihook_files(directories: tuple[str, ...] | list[str]) -> list[str]:
    """hooks.d files in `directories` whose hook runs ocihook (by path name)."""
    found = []
    for directory in directories:
        try:
            names = sorted(os.listdir(directory), key=str.lower)
        except OSError:
            continue
        for name in names:
            if not name.endswith(".json"):
                continue
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as file:
                    if b"ocihook" in file.read():
                        found.append(path)
            except OSError:
                continue
    return found
