"""Atomic checkpoint files: a reader sees the old file or the new one, never a torn write."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "load", "save"]


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], None]) -> None:
    """Call write(file) on a temporary file beside `path`, fsync it, then rename it over `path`.

    The temporary file is in the same directory (so os.replace is an atomic rename on one file
    system) and is removed if `write` fails; the directory is fsynced so the rename survives a crash.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def save(obj: Any, path: str | os.PathLike[str]) -> None:
    """torch.save `obj` to `path` atomically."""
    import torch

    atomic_write(path, lambda handle: torch.save(obj, handle))


def load(path: str | os.PathLike[str]) -> Any:
    """torch.load a checkpoint onto the CPU, accepting only tensors and plain containers (weights_only)."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
