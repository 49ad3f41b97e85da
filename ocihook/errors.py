"""The project's one error contract.

OcihookError is an expected failure: one line on stderr ("ocihook: ..."), exit status 1
(or the status it carries: `ocihook audit`'s unreadable input is 3); so is an OSError from
the environment, named by its path and cause. Anything else that escapes is a bug: one line
("ocihook: internal error: ..."), status 70 (EX_SOFTWARE); EBADF too (a descriptor of our own
was wrong). Status 2 is click's, a usage error. `exit_line` is that rule, for the hook and
every command.

podman maps a hook's stderr that contains "no such file or directory" (any case) to "OCI
runtime attempted to invoke a command that was not found" and exit status 127, which sends
users looking for a missing runtime binary: the messages say "does not exist" instead.
"""

from __future__ import annotations

import errno

_NOT_FOUND = "no such file or directory"

# The exit statuses of the hook and every command (the man page's EXIT STATUS).
EXIT_OK = 0  # success; `ocihook audit`: nothing listed
EXIT_FAILURE = 1  # an expected failure, in one line; a failed check; audit: denials listed
EXIT_USAGE = 2  # a usage error (click's)
EXIT_INPUT = 3  # `ocihook audit`: input unreadable or not audit records
EXIT_SOFTWARE = 70  # an internal error: a bug (sysexits.h EX_SOFTWARE)


def _rephrase(message: str) -> str:
    lower = message.lower()
    while _NOT_FOUND in lower:
        start = lower.index(_NOT_FOUND)
        end = start + len(_NOT_FOUND)
        message = message[:start] + "does not exist" + message[end:]
        lower = message.lower()
    return message


class OcihookError(Exception):
    """An expected failure, reported to the user as one line and a non-zero exit."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(_rephrase(" ".join(str(message).split())))
        self.status = status


def describe(error: OSError) -> str:
    """The cause of an OSError in words ("does not exist" for ENOENT), without the path."""
    if error.errno == errno.ENOENT:
        return "does not exist"
    return error.strerror or str(error)


def from_os_error(error: OSError) -> OcihookError:
    """An environmental OSError that reached the top: its path (if any) and cause."""
    names = [n for n in (error.filename, error.filename2) if n is not None]
    where = " -> ".join(str(n) for n in names)
    return OcihookError(f"{where}: {describe(error)}" if where else describe(error))


def exit_line(error: Exception) -> tuple[int, str]:
    """(exit status, the one line for stderr) of an exception that reached the top."""
    if isinstance(error, OSError) and error.errno != errno.EBADF:
        error = from_os_error(error)
    if isinstance(error, OcihookError):
        return error.status, f"ocihook: {error}"
    return EXIT_SOFTWARE, f"ocihook: internal error: {type(error).__name__}: {error}"
