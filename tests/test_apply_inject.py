"""apply/inject.py's UndoStack: the order the injection's steps are undone in (the log
and record lines of a real failed start: tests/test_hook_errors.py, test_error_contract.py,
test_attacks_*.py)."""

from __future__ import annotations

import pytest

from ocihook.apply.inject import UndoStack


def test_a_failure_undoes_everything_last_first():
    done = []
    with pytest.raises(KeyError):
        with UndoStack() as undo:
            undo.close(lambda: done.append("close roots"))
            undo.revert(lambda: done.append("revert cgroup"))
            undo.close(lambda: done.append("close rootfs"))
            undo.revert(lambda: done.append("roll back the container"))
            raise KeyError("step")
    assert done == ["roll back the container", "close rootfs", "revert cgroup", "close roots"]


def test_success_closes_the_handles_and_keeps_the_changes():
    done = []
    with UndoStack() as undo:
        undo.close(lambda: done.append("close roots"))
        undo.revert(lambda: done.append("revert cgroup"))
        undo.close(lambda: done.append("close rootfs"))
    assert done == ["close rootfs", "close roots"]


def test_an_undo_that_fails_stops_no_other_and_its_error_is_raised_last():
    done = []

    def broken(what: str) -> None:
        done.append(what)
        raise OSError(what)

    with pytest.raises(OSError, match="close roots") as raised:
        with UndoStack() as undo:
            undo.close(lambda: broken("close roots"))
            undo.revert(lambda: done.append("revert cgroup"))
            undo.close(lambda: broken("close rootfs"))
            raise KeyError("step")
    assert done == ["close rootfs", "revert cgroup", "close roots"]
    assert isinstance(raised.value.__context__, KeyError)  # the step's error, in the traceback
