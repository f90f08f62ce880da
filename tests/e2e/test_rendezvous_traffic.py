"""What each rank receives while `hpcdist mpirun` starts a program, counted by Open MPI's pml monitoring."""

from __future__ import annotations

import statistics
from pathlib import Path

from launching import launch

# From 4 to 64 ranks the log-depth trees that MPI runs the rendezvous's reductions and scans on grow by
# four levels. Each level brings a rank at most one message of the reduced vector (an 8-byte count per
# interface of rank 0, and two more) and of each 16-byte scan: a few hundred bytes on a host with a few
# interfaces. 1 KiB bounds that; the allgathers this replaces added 2.5 KiB per rank, 150 KiB from 4 to 64.
_LOG_LEVELS_BYTES = 1024


def _received(directory: Path, np: int) -> list[int]:
    """Bytes each rank received point to point (its own and its collectives'), from every rank's file."""
    got = [0] * np
    files = sorted(directory.glob("prof.*.prof"))
    assert len(files) == np, files  # one file per rank, written at MPI_Finalize
    for path in files:
        for line in path.read_text().splitlines():
            kind, *fields = line.split("\t")
            if kind in ("E", "I"):  # external (the program's) and internal (collectives') point to point
                got[int(fields[1])] += int(fields[2].split()[0])
    return got


def _start(hpcdist: str, np: int, tmp_path: Path) -> list[int]:
    directory = tmp_path / f"np{np}"
    directory.mkdir()
    options = ["--mca", "pml_monitoring_enable", "2", "--mca", "pml_monitoring_enable_output", "3"]
    options += ["--mca", "pml_monitoring_filename", str(directory / "prof")]  # PREFIX.RANK.prof at MPI_Finalize
    result = launch([hpcdist, "mpirun", "-np", str(np), "--oversubscribe", *options, "--", "python", "-c", "pass"], 600)
    assert result.returncode == 0, result.stderr
    return _received(directory, np)


def test_what_each_rank_receives_at_start_up_does_not_grow_from_4_to_64_ranks(hpcdist: str, tmp_path: Path) -> None:
    small, large = _start(hpcdist, 4, tmp_path), _start(hpcdist, 64, tmp_path)
    print(f"\nreceived bytes: 4 ranks {small}\n64 ranks {large}")
    assert all(got > 0 for got in small + large)  # every rank took part, rank 0 included
    assert statistics.median(large) <= statistics.median(small) + _LOG_LEVELS_BYTES
    assert max(large) <= max(small) + _LOG_LEVELS_BYTES
    assert large[0] <= small[0] + _LOG_LEVELS_BYTES  # rank 0, where the reductions end
