"""The local backend's state files (a worker's spec, pid, stop request, GPU count): written
whole or not at all, read as possibly torn."""

import math
import os
from pathlib import Path


def write_state(path: Path, text: str, mode: int = 0o600) -> None:
    """Replace a state file whole (by default mode 0600, the agent's): a temporary file renamed
    over it, so an agent killed mid-write, or a full disk, leaves the old file or the new, never
    part."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # one left behind may have another mode
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w") as f:
        os.fchmod(f.fileno(), mode)  # whatever the agent's umask
        f.write(text)
    os.replace(tmp, path)


def read_number(path: Path, kind: type = int) -> int | float | None:
    """The number in a state file; None when it is missing or unreadable (empty, torn)."""
    try:
        value = kind(path.read_text())
    except (OSError, ValueError):
        return None
    return value if math.isfinite(value) else None
