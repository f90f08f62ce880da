"""Atomic checkpoint files: whole old file or whole new file, never a torn one, and no temp files left."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from hpcdist.resilience import checkpoint


def test_a_checkpoint_round_trips_tensors_and_plain_containers(tmp_path) -> None:
    state: dict[str, Any] = {
        "epoch": 2,
        "losses": [0.5, 0.25],
        "model": {"w": torch.arange(6.0).reshape(2, 3)},
        "rng": [{"cpu": torch.get_rng_state(), "cuda": None}],
        "betas": (0.9, 0.999),
    }
    path = tmp_path / "sub" / "ddp.pt"
    checkpoint.save(state, path)  # creates the directory
    loaded = checkpoint.load(path)
    assert loaded["epoch"] == 2 and loaded["losses"] == [0.5, 0.25] and loaded["betas"] == (0.9, 0.999)
    assert torch.equal(loaded["model"]["w"], state["model"]["w"])
    assert torch.equal(loaded["rng"][0]["cpu"], state["rng"][0]["cpu"]) and loaded["rng"][0]["cuda"] is None
    assert os.listdir(path.parent) == ["ddp.pt"]


def test_a_new_checkpoint_replaces_the_old_one_whole(tmp_path) -> None:
    path = tmp_path / "ddp.pt"
    checkpoint.save({"epoch": 1}, path)
    checkpoint.save({"epoch": 2}, path)
    assert checkpoint.load(path) == {"epoch": 2}
    assert os.listdir(tmp_path) == ["ddp.pt"]


def test_a_write_that_fails_halfway_leaves_the_old_file_and_no_temporary(tmp_path) -> None:
    path = tmp_path / "ddp.pt"
    path.write_bytes(b"old and complete")

    def crash(handle) -> None:
        handle.write(b"half of the ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        checkpoint.atomic_write(path, crash)
    assert path.read_bytes() == b"old and complete"
    assert os.listdir(tmp_path) == ["ddp.pt"]


def test_the_temporary_file_is_beside_the_target_until_the_rename(tmp_path) -> None:
    path = tmp_path / "ddp.pt"
    seen: list[list[str]] = []

    def write(handle) -> None:
        handle.write(b"new")
        seen.append(sorted(os.listdir(tmp_path)))

    checkpoint.atomic_write(path, write)
    assert len(seen[0]) == 1 and seen[0][0].startswith(".ddp.pt.") and seen[0][0].endswith(".tmp")
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["ddp.pt"]


class _Planted:
    """An object whose unpickling calls a function: here it would create the file `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return Path.touch, (self.marker,)


def test_loading_refuses_arbitrary_pickled_objects(tmp_path) -> None:
    """A pickle that runs a function when loaded is refused, and the function never runs (plain data such as a
    builtin exception is not the test: torch 2.14 loads those under weights_only)."""
    path, marker = tmp_path / "evil.pt", tmp_path / "ran"
    torch.save({"obj": _Planted(marker)}, path)
    with pytest.raises(Exception, match=r"[Ww]eights only load failed"):
        checkpoint.load(path)
    assert not marker.exists()
