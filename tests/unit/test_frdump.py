"""Flight Recorder dumps from ledgers: torch's own format, read back by torch's own analyser (torchfrtrace's)."""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcdist.commcall import Call
from hpcdist.contract import RankContract
from hpcdist.forensics import frdump
from hpcdist.forensics.ledger import Ledger

WORLD_AR = ("all_reduce", "", "world")


def _ledger(*calls: tuple[str, str, str], pending_last: bool = True, start: int = 0) -> list[Call]:
    """A rank's ledger from (op, peer, group) calls, the last one still waiting; `start` calls before them dropped."""
    ledger = Ledger()
    for _ in range(start):
        ledger.start(*WORLD_AR[:2], (4,), "float32", WORLD_AR[2]).done = True
    ledger.entries.clear()
    entries = [ledger.start(op, peer, (4,), "float32", group) for op, peer, group in calls]
    for entry in entries[:-1] if pending_last else entries:
        entry.done = True
    return ledger.snapshot()


def _answers(ledgers: dict[int, list[Call]], backend: str = "gloo") -> dict[int, dict]:
    return {
        rank: {"ledger": rows, frdump.PART: {"backend": backend, "clock_ns": 10**18}} for rank, rows in ledgers.items()
    }


def _analyse(
    files: dict[int, bytes], order: list[int], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> tuple[str, Any]:
    """What torchfrtrace's analysis logs for these dumps, and its database, taking the ranks in `order`."""
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.loader import read_dump

    frdump.write(str(tmp_path), files)
    details = {f"{frdump.PREFIX}{r}": read_dump(frdump.PREFIX, str(tmp_path / f"{frdump.PREFIX}{r}")) for r in order}
    args = argparse.Namespace(verbose=False, just_print_entries=False, allow_incomplete_ranks=False, mismatch_cap=10)
    with caplog.at_level(logging.INFO, logger="Flight Recorder"):
        db = build_db(details, args, frdump.VERSION)
    return "".join(f"{record.getMessage()}\n" for record in caplog.records if record.levelno == logging.INFO), db


def test_a_dump_has_the_keys_and_version_of_torchs_own(tmp_path: Path) -> None:
    program = (
        "import sys, torch, torch.distributed as dist\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path}/store', rank=0, world_size=1)\n"
        "dist.all_reduce(torch.ones(2))\n"
        "open(sys.argv[1], 'wb').write(torch._C._distributed_c10d._dump_fr_trace())\n"
    )
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "10"}
    subprocess.run([sys.executable, "-c", program, str(tmp_path / "torch")], env=env, check=True, timeout=120)
    torchs = pickle.loads((tmp_path / "torch").read_bytes())
    ours = pickle.loads(frdump.dumps(_answers({0: _ledger(WORLD_AR)}), 1, 5.0, 0)[0])
    assert ours["version"] == torchs["version"] == frdump.VERSION
    assert sorted(ours) == sorted(torchs)
    assert sorted(ours["entries"][0]) == sorted(torchs["entries"][0])
    assert ours["entries"][0]["profiling_name"] == torchs["entries"][0]["profiling_name"] == "gloo:all_reduce"
    assert ours["entries"][0]["input_dtypes"] == torchs["entries"][0]["input_dtypes"] == ["Float"]


def test_a_rank_missing_from_a_collective_is_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ledgers = {0: _ledger(WORLD_AR, WORLD_AR), 1: _ledger(WORLD_AR, pending_last=False), 2: _ledger(WORLD_AR, WORLD_AR)}
    text, _ = _analyse(frdump.dumps(_answers(ledgers), 3, 5.0, 0), [1, 0, 2], tmp_path, caplog)
    assert "Not all ranks joining collective, sequence number: 2\n" in text
    assert "collective: gloo:all_reduce\nmissing ranks: {1}\n" in text
    assert "collective state: started\n" in text


def _mismatch() -> dict[int, list[Call]]:
    """Rank 1 broadcasts where ranks 0, 2 and 3 all_reduce."""
    agree = {rank: _ledger(WORLD_AR, WORLD_AR) for rank in (0, 2, 3)}
    return agree | {1: _ledger(WORLD_AR, ("broadcast", "root=1", "world"))}


def test_a_mismatched_collective_names_the_rank_that_differs_when_read_after_a_rank_that_agrees(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text, _ = _analyse(frdump.dumps(_answers(_mismatch()), 4, 5.0, 0), [0, 1, 2, 3], tmp_path, caplog)
    assert "Collective sequence number: 2 has errors\n" in text
    assert (
        "error msg: Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH, Expected collective type: 'all_reduce' "
        "does not match found collective type: 'broadcast'\n"
    ) in text


def test_torchfrtrace_blames_the_ranks_that_agree_when_it_reads_the_odd_ranks_dump_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text, _ = _analyse(frdump.dumps(_answers(_mismatch()), 4, 5.0, 0), [1, 0, 2, 3], tmp_path, caplog)
    assert "collective: gloo:broadcast\n" in text
    for rank in (0, 2, 3):  # the docs say so: hpcdist's own first divergence does not depend on the order
        assert (
            f"Culprit rank {rank}; Error type: COLLECTIVE_TYPE_MISMATCH, Expected collective type: 'broadcast' "
            "does not match found collective type: 'all_reduce'"
        ) in text
    assert "Culprit rank 1" not in text


def test_a_consistent_history_of_every_kind_of_collective_passes_its_checks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls = [
        (op, peer, group)
        for group in ("world", "[0, 1]")
        for op, peer in [
            ("all_reduce", ""),
            ("broadcast", "root=0"),
            ("reduce", "root=0"),
            ("all_gather", ""),
            ("all_gather_into_tensor", ""),
            ("reduce_scatter", ""),
            ("reduce_scatter_tensor", ""),
            ("gather", "root=0"),
            ("scatter", "root=0"),
            ("all_to_all_single", ""),
            ("barrier", ""),
        ]
    ]
    ledgers = {rank: _ledger(*calls, pending_last=False) for rank in (0, 1)}
    text, db = _analyse(frdump.dumps(_answers(ledgers, "mpi"), 2, 5.0, 0), [0, 1], tmp_path, caplog)
    assert text == ""
    assert [(c.collective_name, c.pass_check) for c in db.collectives] == [
        (f"gloo:{kind}", True)
        for _ in range(2)
        for kind in [
            "all_reduce",
            "broadcast",
            "reduce",
            "all_gather",
            "_all_gather_base",
            "reduce_scatter",
            "_reduce_scatter_base",
            "gather",
            "scatter",
            "all_to_all",
            "barrier",
        ]
    ]


def test_collectives_that_a_rank_dropped_from_its_ring_buffer_are_left_out_of_every_dump() -> None:
    ledgers = {0: _ledger(WORLD_AR, WORLD_AR, start=3), 1: _ledger(*[WORLD_AR] * 5)}
    files = frdump.dumps(_answers(ledgers), 2, 5.0, 0)
    ids = {rank: [e["collective_seq_id"] for e in pickle.loads(data)["entries"]] for rank, data in files.items()}
    assert ids == {0: [4, 5], 1: [4, 5]}
    assert [e["record_id"] for e in pickle.loads(files[1])["entries"]] == [0, 1]


def test_groups_are_named_alike_on_every_rank_and_each_channel_of_sends_is_a_group_of_its_two_ranks() -> None:
    ledgers = {
        0: _ledger(("all_reduce", "", "[0, 2]"), ("send", "dst=2", "[0, 2]"), ("recv", "src=any", "world")),
        1: _ledger(("send", "dst=0", "world"), ("send", "dst=0", "world"), WORLD_AR),
        2: _ledger(("all_reduce", "", "[0, 2]"), ("recv", "src=0", "[0, 2]"), ("new_op", "", "world")),
    }
    dumps = {rank: pickle.loads(data) for rank, data in frdump.dumps(_answers(ledgers), 3, 5.0, 0).items()}
    world = {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}
    sub = {"name": "1", "desc": "undefined", "ranks": "[0, 2]"}
    sends_in_sub = {"name": "2", "desc": "p2p 0->2 in group [0, 2]", "ranks": "[0, 2]"}
    sends_1_to_0 = {"name": "3", "desc": "p2p 1->0", "ranks": "[0, 1]"}  # rank 0's recv from any is not in it
    assert dumps[0]["pg_config"] == dumps[2]["pg_config"] == {"0": world, "1": sub, "2": sends_in_sub}
    assert dumps[1]["pg_config"] == {"0": world, "3": sends_1_to_0}
    names = {
        rank: [(e["profiling_name"], e["is_p2p"], e["collective_seq_id"], e["p2p_seq_id"]) for e in d["entries"]]
        for rank, d in dumps.items()
    }
    assert names[0] == [("gloo:all_reduce", False, 1, 0), ("gloo:send 0->1", True, 1, 1)]  # no recv from any
    assert names[1] == [
        ("gloo:send 1->0", True, 1, 1),
        ("gloo:send 1->0", True, 2, 2),
        ("gloo:all_reduce", False, 1, 0),
    ]
    assert names[2] == [("gloo:all_reduce", False, 1, 0), ("gloo:recv 1<-0", True, 1, 1)]  # torchfrtrace has no new_op


def test_a_recv_whose_sender_is_elsewhere_is_named_with_the_rank_missing_from_the_collective(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledgers = {rank: _ledger(WORLD_AR, WORLD_AR) for rank in (0, 1, 3)} | {
        2: _ledger(WORLD_AR, ("recv", "src=0", "world"))
    }
    text, _ = _analyse(frdump.dumps(_answers(ledgers), 4, 5.0, 0), [0, 1, 2, 3], tmp_path, caplog)
    assert "Not all ranks joining collective, sequence number: 2\n" in text
    assert "collective: gloo:all_reduce\nmissing ranks: {2}\n" in text
    assert "group info: 1:p2p 0->2\ncollective: gloo:recv 1<-0\nmissing ranks: {0}\n" in text


def test_the_mpi_backend_is_named_gloo_as_torchfrtrace_knows_no_mpi_and_nccl_keeps_torchs_own_dumps() -> None:
    answers = _answers({0: _ledger(WORLD_AR)}, "mpi")
    assert pickle.loads(frdump.dumps(answers, 1, 5.0, 0)[0])["entries"][0]["profiling_name"] == "gloo:all_reduce"
    answers = _answers({0: _ledger(WORLD_AR), 1: _ledger(WORLD_AR)}, "nccl")
    for rank in (0, 1):
        answers[rank][frdump.PART]["torch_dump"] = f"rank {rank}'s dump by torch".encode()
    assert frdump.dumps(answers, 2, 5.0, 0) == {0: b"rank 0's dump by torch", 1: b"rank 1's dump by torch"}
    answers[1][frdump.PART]["torch_dump"] = None  # torch's NCCL recorder could not dump on rank 1: all from ledgers
    names = {
        rank: pickle.loads(data)["entries"][0]["profiling_name"]
        for rank, data in frdump.dumps(answers, 2, 5.0, 0).items()
    }
    assert names == {0: "nccl:all_reduce", 1: "nccl:all_reduce"}


def test_times_come_from_the_ranks_clock_less_each_calls_age() -> None:
    rows = [Call("all_reduce", "", (4,), "float32", "world", 1, -2.5, None, True, False, 1)]  # as an answer sends it
    entry = pickle.loads(frdump.dumps(_answers({0: rows}), 1, 5.0, 0)[0])["entries"][0]
    assert entry["time_created_ns"] == 10**18 - 2_500_000_000
    assert (entry["state"], entry["retired"], entry["timeout_ms"]) == ("completed", True, 5000)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"HPCDIST_FR_DIR": "dumps", "HPCDIST_LOG_DIR": "/logs"}, "/work/dumps"),
        ({"HPCDIST_FR_DIR": "/abs/d/", "HPCDIST_RUN_ID": "abc"}, "/abs/d"),
        ({"HPCDIST_LOG_DIR": "/logs", "HPCDIST_RUN_ID": "abc"}, "/logs/fr"),
        ({"HPCDIST_RUN_ID": "abc", "SLURM_JOB_ID": "7", "TMPDIR": "/scratch"}, "/scratch/hpcdist-fr-abc"),
        ({"SLURM_JOB_ID": "7", "TMPDIR": "/scratch"}, "/scratch/hpcdist-fr-7"),
        ({"TMPDIR": "/scratch"}, "/scratch/hpcdist-fr"),
    ],
)
def test_the_directory_is_the_users_else_the_log_dirs_else_a_temporary_one_per_launch(
    environ: dict[str, str], expected: str
) -> None:
    assert frdump.dump_dir(RankContract.from_environ(environ), environ, "/work") == expected


def test_on_nccl_torchs_recorder_is_turned_on_to_dump_into_the_directory_unless_the_user_chose() -> None:
    assert frdump.nccl_environ({}, "/d") == {
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": "/d/fr_rank_",
    }
    users = {
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/x/t_",
    }
    assert frdump.nccl_environ(users, "/d") == {}


def test_the_command_is_quoted_for_a_shell_and_allows_missing_ranks_when_some_did_not_answer() -> None:
    assert frdump.command("/tmp/a b") == "torchfrtrace '/tmp/a b' -p fr_rank_"
    assert frdump.command("/d", incomplete=True) == "torchfrtrace /d -p fr_rank_ --allow-incomplete-ranks"


def test_writing_replaces_the_dumps_an_earlier_run_left(tmp_path: Path) -> None:
    for name in ("fr_rank_0", "fr_rank_7", "rank-000.log"):
        (tmp_path / name).write_bytes(b"old")
    frdump.write(str(tmp_path), {0: b"new", 1: b"new"})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        "fr_rank_0": b"new",
        "fr_rank_1": b"new",
        "rank-000.log": b"old",
    }


def test_saving_where_nothing_can_be_written_says_so_and_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HPCDIST_FR_DIR", str(tmp_path / "file" / "dumps"))
    line = frdump.save(_answers({0: _ledger(WORLD_AR)}), 1, 5.0, RankContract())
    assert line == (
        f"hpcdist: could not write the Flight Recorder dumps in {tmp_path}/file/dumps: Not a directory; "
        "set HPCDIST_FR_DIR to a writable directory"
    )


@pytest.mark.parametrize(("backend", "turned_on"), [("nccl", True), ("cpu:gloo,cuda:nccl", True), ("gloo", False)])
def test_init_turns_torchs_recorder_on_for_nccl_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, turned_on: bool
) -> None:
    from hpcdist.runtime import bootstrap

    for name in ("FR_BUFFER_SIZE", "NCCL_TRACE_BUFFER_SIZE", "NCCL_DUMP_ON_TIMEOUT", "FR_DUMP_TEMP_FILE"):
        monkeypatch.setenv(f"TORCH_{name}", "")  # noted by monkeypatch, so what init sets is undone after the test
        monkeypatch.delenv(f"TORCH_{name}")
    monkeypatch.delenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", raising=False)
    monkeypatch.setenv("HPCDIST_FR_DIR", str(tmp_path / "fr"))
    bootstrap._turn_on_nccl_recorder(RankContract(), backend)
    assert os.environ.get("TORCH_FR_DUMP_TEMP_FILE") == (f"{tmp_path}/fr/fr_rank_" if turned_on else None)
    assert os.environ.get("TORCH_NCCL_DUMP_ON_TIMEOUT") == ("1" if turned_on else None)
    assert (tmp_path / "fr").is_dir() == turned_on


def test_nothing_is_written_when_no_rank_has_made_a_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCDIST_FR_DIR", str(tmp_path / "fr"))
    line = frdump.save({0: {"ledger": []}, 1: {"ledger": []}}, 2, 5.0, RankContract())
    assert line == "hpcdist: no rank has made a communication call, so there are no Flight Recorder dumps to write"
    assert not (tmp_path / "fr").exists()


def test_saving_names_the_directory_and_a_command_that_allows_for_ranks_that_did_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCDIST_FR_DIR", str(tmp_path / "fr"))
    line = frdump.save(_answers({0: _ledger(WORLD_AR), 2: _ledger(WORLD_AR)}), 3, 5.0, RankContract())
    assert line == (
        f"hpcdist: Flight Recorder dumps of each rank's calls are in {tmp_path}/fr; "
        f"analyse them with: torchfrtrace {tmp_path}/fr -p fr_rank_ --allow-incomplete-ranks"
    )
    assert sorted(path.name for path in (tmp_path / "fr").iterdir()) == ["fr_rank_0", "fr_rank_2"]
