"""torchrun-mode per-rank files: the generated per-node --log-dir, reading it back, and finding each rank's files.

The trees are made here as torchrun 2.13 makes them (DefaultLogsSpecs.reify):
`DIR/node-N/JOBID_XXXXXXXX/attempt_K/LOCAL_RANK/{stdout,stderr}.log`.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from test_render import WEIRD, check_script
from test_slurm import JINJA, SPECS, _bare, launch_words
from test_slurmjob import fake_scontrol

from hpcdist import records
from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.jobs.sbatch import render_sbatch
from hpcdist.jobs.sbatchspec import SbatchSpec
from hpcdist.jobs.torchrunlogs import TorchrunLayout, find_rank_files, read_layout
from hpcdist.launching.output import OutputOptions

LAYOUT = TorchrunLayout("logs", nproc_per_node=2, nnodes=2)


def torchrun_spec(log_dir: str | None, **changes: Any) -> SbatchSpec:
    """SPECS' 2-node torchrun job with 8 GPUs per node, with --log-dir `log_dir`."""
    return _bare(SPECS["gpu-torchrun"], rank_output=OutputOptions(tag=False, log_dir=log_dir), **changes)


# what each node's torchrun would be given: its arguments, one per line of JSON
_ARGV = f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n"


@pytest.mark.parametrize("log_dir", ["logs", "/abs/logs/", *[w for w in WEIRD if w]])
def test_each_nodes_torchrun_gets_a_log_dir_of_its_own_and_the_job_id(tmp_path: Path, log_dir: str) -> None:
    text = render_sbatch(torchrun_spec(log_dir), JINJA)
    check_script(text, tmp_path)
    srun = launch_words(text, "srun")
    wrapper = srun[srun.index("bash") :]  # what srun runs on every node: bash -c WRAPPER torchrun ARGS…
    assert wrapper[3] == "torchrun"
    (tmp_path / "torchrun").write_text(_ARGV)
    (tmp_path / "torchrun").chmod(0o755)
    for node in (0, 1):
        env = {"PATH": "/usr/bin:/bin", "SLURM_NODEID": str(node), "SLURM_JOB_ID": "4242"}
        done = subprocess.run([*wrapper[:3], str(tmp_path / "torchrun"), *wrapper[4:]], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        argv = json.loads(done.stdout)
        assert argv[:3] == [f"--node_rank={node}", f"--log-dir={log_dir}/node-{node}", "--rdzv_id=4242"], argv
        assert argv[3:6] == ["--nproc_per_node=8", "--nnodes=2", "--tee=3"] and argv[-1] == "train.py"
    assert read_layout(text) == TorchrunLayout(log_dir, 8, 2)


def test_scripts_without_per_node_log_dirs_have_no_layout() -> None:
    assert read_layout(render_sbatch(torchrun_spec(None), JINJA)) is None
    srun = records.replace(SPECS["gpu-srun"], rank_output=OutputOptions(log_dir="logs"))
    assert read_layout(render_sbatch(srun, JINJA)) is None
    # restarts and requeue wrap the same line: still found
    both = torchrun_spec("logs", max_restarts=2, requeue=True, time="1:00:00")
    assert read_layout(render_sbatch(both, JINJA)) == TorchrunLayout("logs", 8, 2)


def make_run(node_dir: Path, name: str, attempts: dict[int, dict[int, str]], mtime: float | None = None) -> Path:
    """A torchrun run directory: attempt_K/LOCAL/stdout.log holding the given text, stderr.log `err …`."""
    run = node_dir / name
    for attempt, ranks in attempts.items():
        for local, text in ranks.items():
            folder = run / f"attempt_{attempt}" / str(local)
            folder.mkdir(parents=True)
            (folder / "stdout.log").write_text(text)
            (folder / "stderr.log").write_text(f"err {text}")
    if mtime is not None:
        os.utime(run, (mtime, mtime))
    return run


def test_global_rank_is_node_times_nproc_plus_local_rank(tmp_path: Path) -> None:
    make_run(tmp_path / "node-0", "12_ab3kq9zd", {0: {0: "r0\n", 1: "r1\n"}})
    run = make_run(tmp_path / "node-1", "12_x_y7u2pp", {0: {0: "r2\n", 1: "r3\n"}})
    make_run(tmp_path / "node-1", "123_a1b2c3d4", {0: {0: "other job\n", 1: "other job\n"}})  # 123, not 12
    make_run(tmp_path / "node-1", "1_a1b2c3d4", {0: {0: "other job\n", 1: "other job\n"}})
    found = find_rank_files(tmp_path, "12", LAYOUT, 3)
    assert found is not None and found.stdout == run / "attempt_0" / "1" / "stdout.log"
    assert found.stderr.read_text() == "err r3\n" and not found.chosen
    assert find_rank_files(tmp_path, "12", LAYOUT, 0).stdout.read_text() == "r0\n"  # type: ignore[union-attr]
    for bad in (4, 99):
        with pytest.raises(UsageError, match=f"--rank {bad}: job 12 has ranks 0 to 3"):
            find_rank_files(tmp_path, "12", LAYOUT, bad)


def test_the_latest_run_and_attempt_are_chosen_and_said(tmp_path: Path) -> None:
    node = tmp_path / "node-1"
    make_run(node, "7_zzzzzzzz", {0: {1: "first run\n"}}, mtime=1_000)
    latest = make_run(node, "7_aaaaaaaa", {0: {1: "a0\n"}, 1: {1: "a1\n"}, 10: {1: "a10\n"}, 2: {1: "a2\n"}}, 2_000)
    found = find_rank_files(tmp_path, "7", LAYOUT, 3)
    assert found is not None and found.stdout.read_text() == "a10\n"  # attempt 10 after 2: numbers, not names
    assert (found.runs, found.attempts, found.chosen) == (2, 4, True)
    assert found.describe("7", 3) == (
        "job 7 rank 3: the latest of 2 torchrun runs on node-1 (7_aaaaaaaa), attempt_10 (the latest of 4), local rank "
        f"1: {latest / 'attempt_10' / '1'}"
    )


def test_torchruns_own_restarts_alone_are_said_too(tmp_path: Path) -> None:
    run = make_run(tmp_path / "node-0", "9_abcdefgh", {0: {0: "a0\n"}, 1: {0: "a1\n"}})
    found = find_rank_files(tmp_path, "9", LAYOUT, 0)
    assert found is not None and found.chosen and found.stdout.read_text() == "a1\n"
    assert found.describe("9", 0) == (
        f"job 9 rank 0: torchrun's run on node-0 (9_abcdefgh), attempt_1 (the latest of 2), local rank 0: "
        f"{run / 'attempt_1' / '0'}"
    )


def test_nothing_yet_is_none(tmp_path: Path) -> None:
    assert find_rank_files(tmp_path / "missing", "5", LAYOUT, 0) is None
    (tmp_path / "node-0" / "5_emptyrun").mkdir(parents=True)  # torchrun made the run, not yet an attempt
    assert find_rank_files(tmp_path, "5", LAYOUT, 0) is None
    (tmp_path / "node-1").write_text("")  # not a directory
    assert find_rank_files(tmp_path, "5", LAYOUT, 2) is None


JOB = "JobId={id} JobName=t.sh JobState={state} ExitCode=0:0 NumNodes=2 NumTasks=2 WorkDir={work} StdOut={work}/o.out"


def fake_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, state: str = "COMPLETED") -> Path:
    """An scontrol that knows job 12 (run in a directory `work dir`) and its batch script; the directory."""
    work = tmp_path / "work dir"
    work.mkdir()
    (tmp_path / "batch.sh").write_text(script)
    (tmp_path / "job.txt").write_text(JOB.format(id=12, state=state, work=work) + "\n")
    job, batch = str(tmp_path / "job.txt"), str(tmp_path / "batch.sh")
    body = f"sys.stdout.write(open({job!r} if sys.argv[1] == 'show' else {batch!r}).read())"
    fake_scontrol(tmp_path, monkeypatch, body)
    return work


def test_logs_rank_prints_the_ranks_torchrun_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = render_sbatch(records.replace(torchrun_spec("my logs"), gpus_per_node=None, ntasks_per_node=2))
    work = fake_job(tmp_path, monkeypatch, script)
    make_run(work / "my logs" / "node-1", "12_q1w2e3r4", {0: {0: "two\n", 1: "three\n"}}, mtime=1_000)
    assert main(["logs", "12", "--rank", "3"]) == 0
    assert capsys.readouterr() == ("three\n", "err three\n")  # no note: nothing to choose from
    make_run(work / "my logs" / "node-1", "12_later000", {0: {1: "three again\n"}}, mtime=2_000)
    assert main(["logs", "12", "--rank", "3", "--follow"]) == 0
    out, err = capsys.readouterr()
    assert out == "three again\n" and err.startswith("hpcdist: job 12 rank 3: the latest of 2 torchrun runs on node-1")
    assert err.endswith("err three again\n")
    assert main(["logs", "12", "--rank", "4"]) == 2
    assert "hpcdist: error: --rank 4: job 12 has ranks 0 to 3" in capsys.readouterr().err
    assert main(["logs", "12", "--rank", "1"]) == 2  # node 0 made no run directory here
    err = capsys.readouterr().err
    assert f"job 12 (COMPLETED): torchrun has made no run directory 12_* under {work}/my logs/node-0 here" in err


class Shown(io.StringIO):
    """A stdout another thread can wait on: until some text has been written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def write(self, text: str) -> int:
        with self.changed:
            written = super().write(text)
            self.changed.notify_all()
        return written

    def wait_for(self, text: str, seconds: float = 60) -> None:
        """Return once `text` was written; else raise, saying who waited for what."""
        with self.changed:
            if not self.changed.wait_for(lambda: text in self.getvalue(), seconds):
                raise TimeoutError(f"the job waited {seconds:g} s for --follow to print {text!r}")


def test_follow_goes_on_from_one_run_to_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the script's restart loop starts torchrun again: a second run directory, newer, while --follow runs; each
    # step of the job waits until --follow printed the one before
    work = fake_job(tmp_path, monkeypatch, render_sbatch(torchrun_spec("logs")), state="RUNNING")
    node = work / "logs" / "node-0"
    shown = Shown()
    monkeypatch.setattr(sys, "stdout", shown)
    failed: list[BaseException] = []

    def job() -> None:
        try:
            first = make_run(node, "12_first000", {0: {1: "first\n"}}, mtime=1_000)
            shown.wait_for("first\n")
            with (first / "attempt_0" / "1" / "stdout.log").open("a") as f:
                f.write("first, last line\n")
            shown.wait_for("first, last line\n")
            make_run(node, "12_second00", {0: {1: "second\n"}}, mtime=2_000)
            shown.wait_for("second\n")
            with (node / "12_second00" / "attempt_0" / "1" / "stdout.log").open("a") as f:
                f.write("no newline at the end")
        except (TimeoutError, OSError) as error:  # said by the test below, once --follow ended
            failed.append(error)
        (tmp_path / "next.txt").write_text(JOB.format(id=12, state="COMPLETED", work=work) + "\n")
        os.replace(tmp_path / "next.txt", tmp_path / "job.txt")

    writer = threading.Thread(target=job)
    writer.start()
    try:
        assert main(["logs", "12", "--rank", "1", "--follow", "--timeout", "60"]) == 0
    finally:
        writer.join()
    assert not failed, failed
    out, err = shown.getvalue(), capsys.readouterr().err
    assert out == "first\nfirst, last line\nsecond\nno newline at the end"
    note = "hpcdist: job 12 rank 1: the latest of 2 torchrun runs on node-0 (12_second00), attempt_0, local rank 1: "
    assert err.startswith("err first\n") and note in err and err.endswith("err second\n"), err


def test_logs_rank_of_a_pending_torchrun_job_prints_nothing_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_job(tmp_path, monkeypatch, render_sbatch(torchrun_spec("logs")), state="PENDING")
    assert main(["logs", "12", "--rank", "0"]) == 0
    assert capsys.readouterr() == ("", "")


def test_torchrun_without_log_dir_picks_tagged_lines_or_says_how_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tagged = _bare(SPECS["gpu-torchrun"], rank_output=OutputOptions(tag=True))
    work = fake_job(tmp_path, monkeypatch, render_sbatch(tagged))
    (work / "o.out").write_text("[1]:one\n[10]:ten\n[0]:zero\n[1]:uno\nuntagged\n")
    assert main(["logs", "12", "--rank", "1"]) == 0
    assert capsys.readouterr().out == "one\nuno\n"
    (tmp_path / "batch.sh").write_text(render_sbatch(torchrun_spec(None)))
    assert main(["logs", "12", "--rank", "1"]) == 2
    assert (
        "job 12 ran torchrun with neither --log-dir nor --tag, so no line of its output says which rank wrote it; "
        "submit it again with --log-dir DIR" in capsys.readouterr().err
    )


def test_a_script_from_before_per_node_log_dirs_says_where_torchrun_put_the_files() -> None:
    from hpcdist.jobs.slurmjob import JobInfo, rank_log

    old = 'srun bash -c \'exec "$0" --node_rank="$SLURM_NODEID" "$@"\' torchrun --tee=3 --log-dir=logs x.py\n'
    assert read_layout(old) is None
    with pytest.raises(UsageError, match="torchrun names its files itself"):
        rank_log(old, JobInfo({"JobId": "3", "WorkDir": "/w"}), 0)
