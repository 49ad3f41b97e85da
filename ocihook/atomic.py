"""Write a file so that readers see the old content or the new, never a part."""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """Write `text` to `path` through a hidden temporary file (`.NAME.XXXX.tmp`) in the same
    directory, fsync and rename. Readers that skip dot files or read only *.yaml/*.json
    (NFD's features.d, the runtimes' CDI dirs) never see the temporary file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
