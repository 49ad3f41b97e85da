"""SELinux denials that `ocihook audit` ties to the hook's containers, the files it injected
or the hook itself, counted by class and cause from the audit log as it grows.

The log is read from where the last refresh stopped (whole lines only); a log that was
rotated (a new inode) is finished from the rotated file (`<log>.1`, auditd's name) before
the new one is read from its start, and a log that shrank is read from its start. What was
in the log when the exporter started is its baseline, not counted. The lines read are
parsed and explained as `ocihook audit` does (ocihook/audit/: parse, match against the
records, explain; without the policy oracle, whose setools the exporter does not load).
A log that does not exist (no auditd) is no error; one that cannot be read is.
"""

from __future__ import annotations

import os

from ocihook.audit import parse
from ocihook.audit.explain import explain_all
from ocihook.audit.records import container_from_dict, match

MAX_READ = 64 << 20  # bytes read per refresh at most; the rest waits for the next one


class Denials:
    def __init__(self, path: str) -> None:
        self.path = path
        self.counts: dict[tuple[str, str], int] = {}  # (tclass, cause) -> denials
        self._inode: tuple[int, int] | None = None
        self._offset = 0
        self._started = False

    def refresh(self, bodies: list[dict]) -> list[str]:
        """Read and count what the log gained; `bodies` are the hook's records (to tie the
        denials to containers). Returns one line per problem met."""
        problems: list[str] = []
        first = not self._started
        self._started = True
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._inode, self._offset = None, 0
            return problems
        except OSError as error:
            return [f"{self.path}: {error.strerror}"]
        inode = (st.st_dev, st.st_ino)
        if first:
            self._inode, self._offset = inode, st.st_size  # the baseline
            return problems
        data = b""
        if self._inode is not None and inode != self._inode:
            data += self._rest_of_rotated(problems)
            self._offset = 0
        elif st.st_size < self._offset:
            self._offset = 0  # truncated (copytruncate)
        self._inode = inode
        chunk, problem = self._read_from(self.path, self._offset)
        if problem:
            problems.append(problem)
        else:
            self._offset += len(chunk)
            data += chunk
        if data:
            self._count(data, bodies, problems)
        return problems

    def _rest_of_rotated(self, problems: list[str]) -> bytes:
        rotated = f"{self.path}.1"
        try:
            st = os.stat(rotated)
        except OSError:
            return b""
        if (st.st_dev, st.st_ino) != self._inode:
            return b""
        chunk, problem = self._read_from(rotated, self._offset)
        if problem:
            problems.append(problem)
        return chunk

    @staticmethod
    def _read_from(path: str, offset: int) -> tuple[bytes, str | None]:
        """Whole lines of `path` from `offset` (at most MAX_READ bytes); (data, problem)."""
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                data = handle.read(MAX_READ)
        except OSError as error:
            return b"", f"{path}: unreadable audit log ({error.strerror})"
        end = data.rfind(b"\n")
        return (data[: end + 1] if end >= 0 else b""), None

    def _count(self, data: bytes, bodies: list[dict], problems: list[str]) -> None:
        containers = []
        for body in bodies:
            try:
                containers.append(container_from_dict(body))
            except (ValueError, TypeError, AttributeError, KeyError):
                continue  # an odd record: hookstats counted it already
        result = parse.parse(data.splitlines(keepends=True), source=self.path)
        findings = explain_all(result.events, lambda event, avc: match(event, avc, containers))
        for finding in findings:
            if not (finding.avc.denied and finding.related):
                continue
            key = (finding.avc.tclass or "unknown", finding.cause)
            self.counts[key] = self.counts.get(key, 0) + 1
