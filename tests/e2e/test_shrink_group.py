"""torch's own shrink API, dist.shrink_group, on hpcdist's mpi backends under `hpcdist mpirun --on-failure shrink`.

The program is programs/shrink_group.py: a rank dies after a barrier, the survivors catch the error and shrink.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from launching import PROGRAMS, launch


def _run(hpcdist: str, np: int, scenario: str, out: Path, native: str) -> dict[int, dict[str, Any]]:
    """The program on `np` ranks; each survivor's record by its start rank."""
    argv = [hpcdist, "mpirun", "-np", str(np), "--on-failure", "shrink", "--"]
    result = launch([*argv, "python", str(PROGRAMS / "shrink_group.py"), scenario, str(out)], HPCDIST_MPI_NATIVE=native)
    assert result.returncode == 0, result.stderr
    assert "hpcdist: rank 2 on " in result.stderr and f"; {np - 1} ranks carry on" in result.stderr, result.stderr
    return {int(path.stem[4:]): json.loads(path.read_text()) for path in out.glob("rank*.json")}


# ids without the word "mpi": pytest-mpi would skip such a test outside `--with-mpi` (this one runs mpirun itself)
@pytest.mark.parametrize("native", ["0", "1"], ids=["python-backend", "compiled-backend"])
def test_survivors_shrink_with_torchs_api_and_go_on(hpcdist: str, native: str, tmp_path: Path) -> None:
    records = _run(hpcdist, 3, "world", tmp_path, native)
    assert sorted(records) == [0, 1]
    for start, record in records.items():
        assert record["error"] == ("DistBackendError" if native == "1" else "RanksLostError")
        assert record["sub"] == [2, 3.0]  # the subgroup [0, 1, 2] without its rank 2: 1 + 2
        # the shrunk world: its size, torch's world size and this rank in it, all_reduce on it and on the default
        assert record["world"] == [2, 2, start, 3.0, 3.0]
        assert record["new_group"] == 3.0 and record["gloo"] == 3.0  # gloo's store: the store over MPI, moved
        assert record["ddp"][0] == "mpi4py"  # DDP's step on the shrunk default group, on the backend it shrank
    assert records[0]["ddp"] == records[1]["ddp"]  # the gradients were averaged over both survivors


def test_a_live_rank_or_a_failed_one_left_out_is_refused(hpcdist: str, tmp_path: Path) -> None:
    records = _run(hpcdist, 4, "refused", tmp_path, "1")
    assert sorted(records) == [0, 1]
    for start, record in records.items():
        kind, text = record["alive"]  # rank 3 still ran: ULFM's shrink would wait for it
        assert kind == "ValueError" and f"rank {start}: shrink_group([2, 3]) on group [0,1,2,3]: rank 3 still " in text
        assert "end it first, or make a group of the others with dist.new_group" in text
        kind, text = record["missing"]  # rank 3 died too, and was not named
        assert (kind, text) == (
            "RuntimeError",
            f"rank {start}: shrink_group([2]) on group [0,1,2,3]: rank 3 failed too; MPI's shrink drops every failed "
            "rank: call shrink_group([2, 3])",
        )
        assert record["world"] == [2, 3.0]
