"""The hook the runtime runs (hooks.d points at a script that calls `main`): its arguments,
then the stage they name (ocihook/stages/), and the exit contract.

    ocihook-hook [--config PATH] [--cache-dir DIR]    OCI state JSON on stdin
    ocihook-hook --stage precreate [...]            podman's precreate: the proposed OCI
                                                    config on stdin, the edited one on stdout

Kept lean: stdlib only until a container really asks for devices, no click, and no
PyYAML or jsonschema while the compiled config is fresh. Every expected or
environmental failure is one line on stderr ("ocihook: ...", naming the path and the
cause) and exit status 1; exit status 70 ("ocihook: internal error: ...") is a bug.
"""

from __future__ import annotations

import sys

from ocihook.config.compiled import DEFAULT_CACHE_DIR, DEFAULT_CONFIG
from ocihook.errors import OcihookError, exit_line
from ocihook.request.state import MAX_CONFIG_BYTES, MAX_STATE_BYTES
from ocihook.stages import prestart

USAGE = (
    "usage: ocihook-hook [--stage precreate] [--config PATH] [--cache-dir DIR]  "
    "(OCI state JSON on stdin; at precreate the OCI config)"
)
STAGES = ("prestart", "precreate")  # prestart: every stage that gets the state (poststop too)


def _parse_args(argv: list[str]) -> dict[str, str]:
    options = {"--config": DEFAULT_CONFIG, "--cache-dir": DEFAULT_CACHE_DIR, "--stage": "prestart"}
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        name, eq, value = flag.partition("=")
        if name not in options:
            raise OcihookError(f"unknown argument {flag!r}; {USAGE}")
        if not eq:
            if not args:
                raise OcihookError(f"{name} needs a value")
            value = args.pop(0)
        options[name] = value
    if options["--stage"] not in STAGES:
        raise OcihookError(f"--stage {options['--stage']!r}: one of {', '.join(STAGES)}")
    return options


def main(argv: list[str] | None = None) -> int:
    try:
        options = _parse_args(sys.argv[1:] if argv is None else argv)
        if options["--stage"] == "precreate":
            from ocihook.stages import precreate

            data = sys.stdin.buffer.read(MAX_CONFIG_BYTES + 1)
            sys.stdout.buffer.write(
                precreate.run(data, options["--config"], options["--cache-dir"])
            )
            return 0
        data = sys.stdin.buffer.read(MAX_STATE_BYTES + 1)
        return prestart.run(data, options["--config"], options["--cache-dir"])
    except Exception as error:  # one line and the contract's status (errors.exit_line)
        status, line = exit_line(error)
        sys.stderr.write(line + "\n")
        return status


if __name__ == "__main__":
    raise SystemExit(main())
