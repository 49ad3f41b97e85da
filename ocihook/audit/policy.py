"""Ask libselinux's audit2why why a policy denies an access (ALLOW, TERULE, BOOLEAN, ...)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Iterator

from ocihook.errors import OcihookError

VERDICTS = {
    0: "ALLOW",
    1: "DONTAUDIT",
    2: "TERULE",
    3: "BOOLEAN",
    4: "CONSTRAINT",
    5: "RBAC",
    6: "BOUNDS",
    -1: "UNKNOWN",
    -2: "BADSCON",
    -3: "BADTCON",
    -4: "BADTCLASS",
    -5: "BADPERM",
    -6: "BADCOMPUTE",
    -7: "NOPOLICY",
}


@dataclass
class Verdict:
    """audit2why's answer for one access: its verdict name and detail."""

    verdict: str
    booleans: list[tuple[str, int]] = field(default_factory=list)
    constraint: str | None = None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """libsepol prints to file descriptor 2 for every unknown type; keep that off the user."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class Policy:
    """A binary policy loaded into audit2why (one per process: audit2why keeps global state)."""

    _loaded: str | None = None

    def __init__(self, path: str | None) -> None:
        """Load `path`, or the host's loaded policy when None (SELinux enabled)."""
        try:
            import selinux.audit2why as audit2why

            import selinux
        except ImportError as error:
            raise OcihookError(
                f"audit2why is not available ({error}): install python3-selinux"
            ) from None
        if path is None:
            if not selinux.is_selinux_enabled():
                raise OcihookError("SELinux is not enabled here: pass --policy FILE")
            path = selinux.selinux_current_policy_path()
        self._audit2why = audit2why
        self.path = str(path)
        self._cache: dict[tuple, Verdict] = {}
        if Policy._loaded is not None:
            audit2why.finish()
            Policy._loaded = None
        try:
            with _quiet_stderr():
                status = audit2why.init(self.path)
        except (SystemError, ValueError, OSError) as error:
            cause = error.__cause__ or error
            raise OcihookError(f"cannot load policy {self.path}: {cause}") from None
        if status != 0:
            raise OcihookError(f"cannot load policy {self.path}")
        Policy._loaded = self.path

    def analyze(self, scontext: str, tcontext: str, tclass: str, perms: list[str]) -> Verdict:
        """audit2why.analyze() for one access, cached; bad input gives a BAD* verdict."""
        key = (scontext, tcontext, tclass, tuple(perms))
        if key in self._cache:
            return self._cache[key]
        clean = [p for p in perms if p.isprintable() and "\0" not in p]
        if not clean or any("\0" in s for s in (scontext, tcontext, tclass)):
            verdict = Verdict("BADPERM" if not clean else "BADSCON")
        else:
            with _quiet_stderr():
                code, data = self._audit2why.analyze(scontext, tcontext, tclass, clean)
            verdict = Verdict(VERDICTS.get(code, "UNKNOWN"))
            if verdict.verdict == "BOOLEAN" and data:
                verdict.booleans = [(str(name), int(value)) for name, value in data]
            elif verdict.verdict == "CONSTRAINT" and data:
                verdict.constraint = str(data).strip()
        self._cache[key] = verdict
        return verdict
