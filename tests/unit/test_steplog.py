"""The step log: rank 0 alone appends one flushed `epoch step world_size unix_time` line per step; read() parses it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpcdist.cli import build_parser
from hpcdist.cli.launch import workload_options
from hpcdist.errors import UsageError
from hpcdist.workloads import WorkloadOptions, steplog


def test_rank_0_appends_one_line_per_step_and_other_ranks_write_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "steps.log")
    before = time.time()
    steplog.record(path, 0, 4, 1, 1)
    steplog.record(path, 1, 4, 1, 1)  # not rank 0: nothing
    steplog.record(None, 0, 4, 1, 2)  # no log asked for: nothing
    steplog.record(path, 0, 3, 2, 5)  # after a shrink, whichever rank is rank 0 appends
    lines = Path(path).read_text().splitlines()
    assert [line.split()[:3] for line in lines] == [["1", "1", "4"], ["2", "5", "3"]]
    steps = steplog.read(path)
    assert [(s.epoch, s.step, s.world_size) for s in steps] == [(1, 1, 4), (2, 5, 3)]
    assert before <= steps[0].time <= steps[1].time <= time.time()


def test_a_line_cut_short_is_left_out_and_a_wrong_line_is_named(tmp_path: Path) -> None:
    cut = tmp_path / "cut.log"
    cut.write_text("1 1 2 100.5\n1 2 2 10")  # its writer killed mid-line
    assert steplog.read(str(cut)) == [steplog.LoggedStep(1, 1, 2, 100.5)]
    wrong = tmp_path / "wrong.log"
    wrong.write_text("1 1 2 100.5\n1 two 2 101.0\n")
    with pytest.raises(UsageError, match=r"wrong\.log:2: expected `epoch step world_size unix_time`, got '1 two 2"):
        steplog.read(str(wrong))


def test_the_cli_hands_the_step_log_to_the_workload(tmp_path: Path) -> None:
    args = build_parser().parse_args(["run", "ddp", "--step-log", str(tmp_path / "s.log")])
    assert workload_options(args) == WorkloadOptions(step_log=str(tmp_path / "s.log"))
