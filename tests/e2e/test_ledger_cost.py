"""The ledger's cost in `hpcdist bench`: each backend timed with hang forensics' ledger on and off, row by row."""

from __future__ import annotations

import json

from launching import launch

BENCH = ["bench", "all_reduce", "-b", "8", "-e", "8", "-n", "40", "-w", "4", "--backend", "mpi,gloo"]


def test_bench_times_each_backend_with_and_without_the_ledger(hpcdist: str) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "2", "--", hpcdist, *BENCH, "--without-forensics", "--json"], timeout=150
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    rows = [(row["impl"], row["out_of_place"]["nwrong"], row["in_place"]["nwrong"]) for row in doc["results"]]
    impls = ["torch/mpi4py", "torch/mpi4py no forensics", "torch/gloo", "torch/gloo no forensics"]
    assert rows == [(impl, 0, 0) for impl in impls]


def test_without_the_ledger_on_there_is_nothing_to_compare(hpcdist: str) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "2", "--", hpcdist, *BENCH, "--without-forensics"],
        timeout=150,
        HPCDIST_FORENSICS="0",
    )
    assert result.returncode == 2, result.stderr
    assert "hpcdist: error: --without-forensics compares hang forensics on and off, but it is off here" in (
        result.stderr
    )
