"""Per-rank output, pure parts: rank lists, log names, the shim's variables, the router, the sbatch options."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
from test_render import WEIRD, bash_words, check_script
from test_slurm import allocation, from_launcher, launch_text, launch_words, step_dry_run

from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.events import Event, Failed, Ready, Vanished, encode
from hpcdist.launching.outcome import LaunchOutcome
from hpcdist.launching.output import (
    Console,
    Failure,
    OutputOptions,
    OutputRouter,
    shows_banners,
    summary,
)
from hpcdist.launching.restarts import describe_end
from hpcdist.launching.watch import MpirunWatch
from hpcdist.lines import log_name, split_segments, split_tag
from hpcdist.values import parse_ranks

TOKEN = "0123456789abcdef"


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("SLURM_", "HPCDIST_")):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("text", "ranks"),
    [("0", {0}), ("0,3", {0, 3}), ("0-3,7", {0, 1, 2, 3, 7}), (" 2 - 4 , 2", {2, 3, 4}), ("5-5", {5})],
)
def test_rank_lists(text: str, ranks: set[int]) -> None:
    assert parse_ranks(text, 8) == ranks


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8", "--ranks '8': rank 8 does not exist in a job of 8 ranks (ranks count from 0); give ranks from 0 to 7"),
        ("0-9", "rank 9 does not exist in a job of 8 ranks"),
        ("3-1", "the range '3-1' runs backwards; write it as 1-3"),
        ("a", "'a' is not a rank or a range; use e.g. 0,3 or 0-3,7"),
        ("", "'' is not a rank or a range"),
        ("0,,1", "'' is not a rank or a range"),
        ("-1", "'-1' is not a rank or a range"),
    ],
)
def test_bad_rank_lists(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=__import__("re").escape(message)):
        parse_ranks(text, 8)


@pytest.mark.parametrize(("rank", "size", "name"), [(3, 4, "rank-003.log"), (0, 1, "rank-000.log"),
                                                     (7, 1000, "rank-007.log"),
                                                     (7, 1001, "rank-0007.log")])  # fmt: skip
def test_log_names_are_padded_to_the_largest_rank(rank: int, size: int, name: str) -> None:
    assert log_name(rank, size) == name


def test_split_tag() -> None:
    assert split_tag(b"[n1:3] loss 0.21\n") == ("n1", 3, None, b"loss 0.21\n")
    assert split_tag(b"[n1:3:17] loss 0.21\n") == ("n1", 3, 17, b"loss 0.21\n")
    assert split_tag(b"[n1:3:] loss\n") is None
    assert split_tag(b"[n1:3]loss\n") is None
    assert split_tag(b"prterun noticed that\n") is None
    assert split_tag(b"x [n1:3] late tag\n") is None


def _ctl(event: Event) -> bytes:
    """The line a rank's event comes as."""
    return encode(event, TOKEN).encode()


def _console(options: OutputOptions, np: int) -> Console:
    """What hpcdist mpirun puts between mpirun's output and ours: the watch (control lines), then the router."""
    return Console(MpirunWatch(TOKEN), OutputRouter(options, np))


def _feed(console: Console, stream: str, data: bytes, size: int) -> bytes:
    """Feed `data` in chunks of `size` bytes, then its end, and return everything shown."""
    shown = b"".join(console.feed(stream, data[i : i + size]) for i in range(0, len(data), size))
    return shown + console.feed(stream, b"")


MPIRUN_OUT = (
    b"[n1:0] hello from 0\n"
    b"[n2:3] hello from 3\n" + _ctl(Ready(0)) + b"[n2:3] " + _ctl(Failed(3, "exit code 1")) + b"[n2:3] Traceback\n"
    b"--------------------------------------------------------------------------\n"
    b"\0[n1:1] last words"  # PRRTE ends a banner with a NUL: the next line starts with it
)


@pytest.mark.parametrize("size", [1, 7, 4096])
def test_router_shows_selected_ranks_drops_control_lines_and_keeps_tails(size: int) -> None:
    router = _console(OutputOptions(ranks="0"), 4)
    shown = _feed(router, "stderr", MPIRUN_OUT, size)
    assert shown == b"[n1:0] hello from 0\n" + b"-" * 74 + b"\n"  # rank 1's last words: hidden
    assert (router.watch.book.ready, router.watch.failed) == ({0}, {3: "exit code 1"})
    (failure,) = router.failures()
    assert (failure.rank, failure.host, failure.how) == (3, "n2", "exit code 1")
    assert failure.tail == (b"[n2:3] hello from 3\n", b"[n2:3] Traceback\n")


def test_router_without_tags_strips_them_and_a_foreign_token_is_an_ordinary_line() -> None:
    router = _console(OutputOptions(tag=False), 4)
    other = b"[n1:2] @@hpcdist:ffffffffffffffff:failed:2:exit code 1\n"
    assert _feed(router, "stdout", b"[n1:0] a\n" + other + b"plain\n", 3) == (
        b"a\n@@hpcdist:ffffffffffffffff:failed:2:exit code 1\nplain\n"
    )
    assert router.failures() == []


def test_router_keeps_only_the_last_lines() -> None:
    router = _console(OutputOptions(tail=3), 2)
    _feed(router, "stdout", b"".join(b"[h:1] line %d\n" % i for i in range(50)), 100)
    _feed(router, "stderr", _ctl(Failed(1, "exit code 7")), 100)
    (failure,) = router.failures()
    assert failure.tail == (b"[h:1] line 47\n", b"[h:1] line 48\n", b"[h:1] line 49\n")


@pytest.mark.parametrize("tag", [True, False])
def test_router_puts_a_ranks_last_lines_back_in_the_order_its_tagger_numbered_them(tag: bool) -> None:
    """mpirun passes a rank's stdout and stderr on through two pipes: its traceback may come before its last prints."""
    router = _console(OutputOptions(tag=tag, tail=4), 4)
    out = b"".join(b"[h:2:%d] step %d\n" % (i + 1, i) for i in range(30))
    err = b"[h:2:31] Traceback\n[h:2:32] ValueError: NaN\n" + _ctl(Failed(2, "exit code 1"))
    assert _feed(router, "stderr", err, 7) == (
        b"[h:2] Traceback\n[h:2] ValueError: NaN\n" if tag else b"Traceback\nValueError: NaN\n"
    )
    assert _feed(router, "stdout", out, 64).splitlines()[-1] == (b"[h:2] step 29" if tag else b"step 29")
    (failure,) = router.failures()
    tail = (b"step 28\n", b"step 29\n", b"Traceback\n", b"ValueError: NaN\n")
    assert failure.tail == tuple((b"[h:2] " if tag else b"") + line for line in tail)


def test_router_reads_open_mpis_wrapped_message_about_a_signalled_rank() -> None:
    router = _console(OutputOptions(), 4)
    message = (
        b"[vm:1] before\n"
        b"--------------------------------------------------------------------------\n"
        b"prterun noticed that process rank 1 with PID 25327 on node vm exited on\n"
        b"signal 9 (Killed).\n"
    )
    assert _feed(router, "stderr", message, 5) == message
    (failure,) = router.failures()
    assert (failure.rank, failure.host, failure.how, failure.tail) == (
        1,
        "vm",
        "killed by SIGKILL",
        (b"[vm:1] before\n",),
    )


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_mpirun_dry_run_prints_the_variables(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The dry run is the command hpcdist mpirun runs: every line tagged and numbered for its router, which filters
    --ranks and tags the console itself; a script, which nobody routes, asks the tagger for what the options say."""
    logs = str(tmp_path / "logs")
    asked = ["--mpirun", "mpirun", "-np", "4", "--tag", "--log-dir", logs, "--ranks", "0,3", "--", "python", "x.py"]
    status, out, _ = run(capsys, "mpirun", "--dry-run", *asked)
    words = shlex.split(out)
    assert status == 0 and "HPCDIST_RANKS=0,3" not in words
    assert words[words.index("HPCDIST_TAG=numbered") - 1 :][:4] == [
        "-x",
        "HPCDIST_TAG=numbered",
        "-x",
        f"HPCDIST_LOG_DIR={logs}",
    ]
    status, out, _ = run(capsys, "mpirun", "--script", "-", *asked)
    exports = (
        f"export HPCDIST_LOG_DIR={logs}\nexport HPCDIST_MPI=openmpi\nexport HPCDIST_RANKS=0,3\nexport HPCDIST_TAG=1\n"
    )
    assert status == 0 and exports in out
    assert " -x HPCDIST_TAG -x HPCDIST_LOG_DIR -x HPCDIST_RANKS " in out
    status, out, _ = run(capsys, "mpirun", "--script", "-", "--mpirun", "mpirun", "-np", "4", "--no-tag", "--ranks",
                         "1", "--", "python", "x.py")  # fmt: skip
    assert "export HPCDIST_RANKS=1\n" in out and "HPCDIST_TAG" not in out and "HPCDIST_CONTROL" not in out
    status, out, _ = run(capsys, "mpirun", "--script", "-", "--mpirun", "mpirun", "-np", "4", "--", "x")
    assert "HPCDIST_TAG" not in out and "HPCDIST_RANKS" not in out  # the script's lines print as the program's


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mpirun", "-np", "4", "--ranks", "0,4", "--", "true"], "--ranks '0,4': rank 4 does not exist in a job of 4"),
        (["mpirun", "-np", "2", "--bare", "--log-dir", "x", "--", "true"], "need hpcdist's wrapper around each rank"),
        (["mpirun", "-np", "2", "--bare", "--no-tag", "--", "true"], "need hpcdist's wrapper around each rank"),
        (["mpirun", "-np", "2", "--bare", "--tail", "5", "--", "true"], "drop --bare"),
        (["mpirun", "-np", "2", "--log-dir", " ", "--", "true"], "--log-dir needs a value"),
        (["sbatch", "-N", "2", "--ntasks-per-node", "2", "--ranks", "4", "--", "x"], "rank 4 does not exist"),
        (["sbatch", "-N", "2", "--launch", "torchrun", "--ranks", "0", "--", "x.py"], "--nodes 1 only"),
    ],
)
def test_bad_output_options(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    status, _, err = run(capsys, *argv[:1], *(["--dry-run", "--mpirun", "mpirun"] if argv[0] == "mpirun" else []),
                         *argv[1:])  # fmt: skip
    assert status == 2
    assert err.startswith("hpcdist: error: ") and message in err, err


# what each mode's script holds for --tag --log-dir DIR: ("word", DIR as one shell word) or ("text", DIR quoted)
@pytest.mark.parametrize(
    ("launch", "expected"),
    [
        ("srun", [("text", " -m hpcdist mpirun -np 4 --mpi srun --tag --log-dir {q} -- \\\n    python3 train.py\n")]),
        ("mpirun", [("text", " -m hpcdist mpirun -np 4 --mpirun mpirun --mpi openmpi --tag --log-dir {q} -- \\\n"
                             "    python3 train.py\n")]),
        ("torchrun", [("text", "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[${{rank}}]:'\n"),
                      ("word", "--tee=3"), ("word", "--log-dir={d}")]),
    ],
)  # fmt: skip
@pytest.mark.parametrize("log_dir", ["logs", *WEIRD[:5]])
def test_sbatch_scripts_tag_and_log_by_each_launchers_means(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    launch: str,
    expected: list[tuple[str, str]],
    log_dir: str,
) -> None:
    status, out, err = run(capsys, "sbatch", "-N", "2", "--ntasks-per-node", "2", "--launch", launch, "--tag",
                           "--log-dir", log_dir, "--python", "python3", "--", "python3", "train.py")  # fmt: skip
    assert status == 0, err
    check_script(out, tmp_path)
    for kind, item in expected:
        text = item.format(d=log_dir, q=shlex.quote(log_dir))
        assert (shlex.quote(text) if kind == "word" else text) in out, text
    if launch == "torchrun":
        return
    # the srun and mpirun modes: the directory reaches hpcdist mpirun as one word, exactly; it makes it when it runs
    launcher = ["--mpi", "srun"] if launch == "srun" else ["--mpirun", "mpirun", "--mpi", "openmpi"]
    words = ["-m", "hpcdist", "mpirun", "-np", "4", *launcher, "--tag", "--log-dir", log_dir, "--"]
    assert bash_words(launch_text(out, "python3")) == ["python3", *words, "python3", "train.py"]
    assert "mkdir" not in out and "HPCDIST_" not in out
    starts = [line for line in out.splitlines() if line.lstrip().startswith(("srun ", "mpirun "))]
    assert starts == []  # the launcher is hpcdist mpirun's to run
    # the step, as the job runs it (the venv's Open MPI on PATH): each rank is told the directory, made absolute, and
    # its lines are tagged
    path = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    monkeypatch.chdir(tmp_path)
    line = step_dry_run(out, "python3", {**allocation(2, 2), **path}, monkeypatch, capsys)
    given = [f"HPCDIST_LOG_DIR={tmp_path / log_dir}", "HPCDIST_TAG=numbered"]
    if launch == "srun":  # set by `env` for srun, which passes every variable on
        assert set(given) <= set(line[: line.index("srun")]) and line[0] == "env"
    else:  # passed on with Open MPI's -x
        assert [line[line.index(item) - 1] for item in given] == ["-x", "-x"]
        assert from_launcher(line, "mpirun")[:3] == ["mpirun", "-np", "4"]


def test_sbatch_srun_rank_filter_is_hpcdist_mpirun_s(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = run(capsys, "sbatch", "-N", "2", "--ntasks-per-node", "2", "--ranks", "0,3", "--python",
                           "python3", "--", "python3", "train.py")  # fmt: skip
    assert status == 0, err
    check_script(out, tmp_path)
    assert launch_words(out, "python3") == ["python3", "-m", "hpcdist", "mpirun", "-np", "4", "--mpi", "srun",
                                            "--ranks", "0,3", "--", "python3", "train.py"]  # fmt: skip
    assert "HPCDIST_" not in out and "--tag" not in out and "--label" not in out  # hpcdist mpirun tells its ranks


def test_sbatch_srun_takes_log_dir_and_ranks_together(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rank's file, and only these ranks on the console: both reach the step, and hpcdist mpirun takes them."""
    status, out, err = run(capsys, "sbatch", "-N", "2", "--ntasks-per-node", "2", "--log-dir", "my logs", "--ranks",
                           "0,3", "--python", "python3", "--", "python3", "train.py")  # fmt: skip
    assert status == 0 and err == ""
    check_script(out, tmp_path)
    options = ["mpirun", "-np", "4", "--mpi", "srun", "--ranks", "0,3", "--log-dir", "my logs"]
    assert launch_words(out, "python3") == ["python3", "-m", "hpcdist", *options, "--", "python3", "train.py"]
    allocation = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "4",
                  "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_CPUS_ON_NODE": "2", "SLURMD_NODENAME": "n1"}  # fmt: skip
    for name, value in allocation.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    status, line, err = run(capsys, *options, "--dry-run", "--", "python3", "train.py")
    assert status == 0, err
    assert f"HPCDIST_LOG_DIR={tmp_path / 'my logs'}" in shlex.split(line)  # each rank writes its file there


def test_sbatch_without_output_options_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    for launch in ("srun", "mpirun", "torchrun"):
        _, out, _ = run(capsys, "sbatch", "--launch", launch, "--python", "python3", "--", "python3", "train.py")
        assert "HPCDIST_TAG" not in out and "--label" not in out and "--tee" not in out


RULE = b"-" * 74 + b"\n"
ABORT_BANNERS = (  # measured with Open MPI 5.0.11 and MPICH 5.0.2: rank 1 raised, the shim called MPI_Abort
    b"[vm:1] RuntimeError: rank one is broken\n"
    + RULE
    + b"MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\n  Proc: [[35948,1],1]\n  Errorcode: 1\n\n"
    b"NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\n"
    + RULE
    + b"[vm:0] RuntimeError: Connection closed by peer\n"
    + RULE
    + b'prterun has exited due to process rank 1 with PID 0 on node vm calling\n"abort". This may have caused\n'
    + RULE
    + RULE
    + b"prterun detected that one or more processes exited with non-zero status,\nthus causing the job to be "
    b"terminated. The first process to do so was:\n\n   Process name: [prterun-vm-3536@1,0]\n   Exit code:    2\n"
    + RULE
    + b"\0"  # PRRTE ends a banner with a NUL
    + b"[vm:1] Abort(1) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1) - process 1\n"
    b"Abort(1) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1) - process 1\n"
)
OTHER_HELP = (  # a lost host: hpcdist's error line follows it, and it says more (which daemon, what to check)
    RULE
    + b"PRTE has lost communication with a remote daemon.\n\n  Remote daemon: [prterun-n1-16000@0,1] on node n2\n"
    + RULE
)


@pytest.mark.parametrize("size", [1, 7, 4096])
def test_the_launchers_failure_banners_are_hidden_and_its_other_help_blocks_shown_whole(size: int) -> None:
    console = _console(OutputOptions(tag=True), 2)
    shown = _feed(console, "stderr", ABORT_BANNERS + OTHER_HELP + b"mpirun's own line\n" + RULE + b"unclosed\n", size)
    assert shown == (
        b"[vm:1] RuntimeError: rank one is broken\n[vm:0] RuntimeError: Connection closed by peer\n"
        + OTHER_HELP
        + b"mpirun's own line\n"
        + RULE
        + b"unclosed\n"  # a help block mpirun never closed: shown at the end as it came
    )
    assert [(f.rank, f.how) for f in console.failures()] == [(1, "called MPI_Abort")]  # named from the banner
    assert console.failures()[0].tail == (b"[vm:1] RuntimeError: rank one is broken\n",)  # no Abort line either


@pytest.mark.parametrize("size", [1, 4096])
def test_mpichs_abort_line_names_the_rank_that_called_mpi_abort_and_is_left_out(size: int) -> None:
    console = _console(OutputOptions(tag=False), 2)  # measured with MPICH 5.0.2: a program's own MPI_Abort(7)
    abort = (
        b"[vm:1] Abort(7) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 7) - process 1\n"
    )
    assert _feed(console, "stderr", b"[vm:1] rank 1 aborting\n" + abort, size) == b"rank 1 aborting\n"
    assert [(f.rank, f.host, f.how, f.tail) for f in console.failures(7)] == [
        (1, "vm", "called MPI_Abort", (b"rank 1 aborting\n",))
    ]


EQUALS = b"=" * 83 + b"\n"
HYDRA_BANNERS = (  # measured 2026-11-29 as rank 1 of 2 was killed: MPICH 5.0.2's, then Intel MPI 2021.18's two
    b"\n" + EQUALS + b"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 6838 RUNNING AT localhost\n"
    b"=   EXIT CODE: 9\n=   CLEANING UP REMAINING PROCESSES\n=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES\n"
    + EQUALS
    + b"YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n"
    b"This typically refers to a problem with your application.\nPlease see the FAQ page for debugging suggestions\n"
    b"\n"
    + EQUALS
    + b"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK 0 PID 6780 RUNNING AT localhost\n"
    b"=   KILLED BY SIGNAL: 9 (Killed)\n"
    + EQUALS
    + b"\n"
    + EQUALS
    + b"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   RANK 1 PID 6781 RUNNING AT localhost\n"
    b"=   KILLED BY SIGNAL: 9 (Killed)\n" + EQUALS
)


@pytest.mark.parametrize("size", [1, 7, 4096])
def test_hydras_bad_termination_banners_and_the_blank_line_before_each_are_hidden(size: int) -> None:
    console = _console(OutputOptions(tag=True), 2)
    shown = _feed(console, "stdout", b"[vm:0] before\n" + HYDRA_BANNERS + b"\n\nmpiexec's own line\n\n", size)
    assert shown == b"[vm:0] before\n\n\nmpiexec's own line\n\n"  # other blank lines stay, in order


def test_hpcdist_debug_keeps_hydras_banners() -> None:
    console = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=True), 2, hide_banners=False))
    assert _feed(console, "stdout", HYDRA_BANNERS, 4096) == HYDRA_BANNERS


def test_hpcdist_debug_keeps_the_launchers_failure_banners() -> None:
    assert (shows_banners({}), shows_banners({"HPCDIST_DEBUG": "0"}), shows_banners({"HPCDIST_DEBUG": "1"})) == (
        False,
        False,
        True,
    )
    console = Console(MpirunWatch(TOKEN), OutputRouter(OutputOptions(tag=True), 2, hide_banners=False))
    assert _feed(console, "stderr", ABORT_BANNERS, 4096) == ABORT_BANNERS.replace(b"\0", b"")


def test_router_reads_open_mpis_message_about_a_rank_that_called_mpi_abort_itself() -> None:
    router = _console(OutputOptions(), 4)
    message = (
        b"[vm:3] loss nan\n"
        b"prterun has exited due to process rank 3 with PID 0 on node vm calling\n"
        b'"abort". This may have caused other processes in the application to be\n'
    )
    _feed(router, "stderr", message, 9)
    (failure,) = router.failures()
    assert (failure.rank, failure.host, failure.how, failure.tail) == (
        3,
        "vm",
        "called MPI_Abort",
        (b"[vm:3] loss nan\n",),
    )


def test_a_control_line_before_open_mpis_message_names_how_the_rank_failed() -> None:
    router = _console(OutputOptions(), 4)
    _feed(router, "stderr", _ctl(Failed(3, "exit code 1")) +
          b"prterun has exited due to process rank 3 with PID 0 on node vm calling\n\"abort\".\n", 4096)  # fmt: skip
    assert [(f.rank, f.host, f.how) for f in router.failures()] == [(3, "vm", "exit code 1")]


def test_summary_names_each_failed_rank_and_shows_its_tail() -> None:
    failures = [Failure(3, "n1", "exit code 1", (b"[n1:3] a\n", b"[n1:3] b\n", b"[n1:3] c")),
                Failure(5, "n2", "called MPI_Abort", (b"x\n",)),
                Failure(6, "n2", "killed by signal 9", ())]  # fmt: skip
    assert summary(failures, 2) == (  # rank 6 printed nothing: the headline names it, no block says so again
        "hpcdist: rank 3 on n1 failed (exit code 1); its last 2 lines:\n[n1:3] b\n[n1:3] c\n"
        "hpcdist: rank 5 on n2 failed (called MPI_Abort); its last line:\nx\n"
    )
    assert summary(failures[:1], 0) == "hpcdist: rank 3 on n1 failed (exit code 1)\n"


@pytest.mark.parametrize(("ranks", "repeated"), [(None, False), ("0", True)])
def test_a_failed_rank_s_lines_shown_as_they_came_are_not_repeated_in_the_summary(
    ranks: str | None, repeated: bool
) -> None:
    router = _console(OutputOptions(ranks=ranks), 2)
    shown = _feed(
        router, "stderr", b"[h:1] Traceback\n[h:1] ValueError: bad batch\n" + _ctl(Failed(1, "exit code 1")), 9
    )
    (failure,) = router.failures()
    assert (shown != b"", failure.seen) == (not repeated, not repeated)
    block = (
        "hpcdist: rank 1 on h failed (exit code 1); its last 2 lines:\n[h:1] Traceback\n[h:1] ValueError: bad batch\n"
    )
    assert summary([failure], 20) == (block if repeated else "")


@pytest.mark.parametrize(
    ("data", "segments", "rest"),
    [
        (b"a\nb\r\nc", [(b"a", b"\n"), (b"b", b"\n")], b"c"),
        (b"\r 10%\r 20%\r", [(b"", b"\r"), (b" 10%", b"\r")], b" 20%\r"),  # a last \r may be a \r\n
        (b"x\r\n", [(b"x", b"\n")], b""),
        (b"", [], b""),
    ],
)
def test_split_segments(data: bytes, segments: list[tuple[bytes, bytes]], rest: bytes) -> None:
    assert split_segments(data) == (segments, rest)


@pytest.mark.parametrize("size", [1, 5, 4096])
def test_a_progress_bars_redraws_pass_at_once_but_stay_out_of_the_tail(size: int) -> None:
    """tqdm's \r redraws reach the console as they come (tag stripped with --no-tag, hidden ranks hidden)."""
    console = _console(OutputOptions(tag=False, ranks="0"), 2)
    bar = b"[n1:0]  50%|#####\r[n1:1]  50%|#####\r[n1:0] 100%|##########\n"
    first = console.feed("stderr", bar[:size])
    shown = first + b"".join(console.feed("stderr", bar[i : i + size]) for i in range(size, len(bar), size))
    assert shown == b" 50%|#####\r100%|##########\n"
    assert console.feed("stderr", b"") == b""
    console.watch.failed[0] = "exit code 1"
    (failure,) = console.failures()
    assert failure.tail == (b"100%|##########\n",)


HYDRA_KILL = (
    b"[vm:2] step 3\n"
    + _ctl(Vanished(2, "vm"))  # rank 2's tagger: its rank ended without a word
    + b"[vm:3] "
    + _ctl(Failed(3, "exit code 1", "vm"))  # gloo saw rank 2's sockets close
    + b"=   PID 10969 RUNNING AT localhost\n=   EXIT CODE: 9\n"  # Hydra's banner: often another rank's PID
)


@pytest.mark.parametrize("size", [1, 4096])
def test_under_hydra_a_rank_whose_tagger_saw_it_vanish_is_named_first(size: int) -> None:
    console = Console(MpirunWatch(TOKEN, vanished_named=True), OutputRouter(OutputOptions(tag=True), 4))
    shown = _feed(console, "stderr", HYDRA_KILL, size)
    assert b"@@hpcdist" not in shown
    assert [(f.rank, f.host, f.how) for f in console.failures(9)] == [
        (2, "vm", "killed or exited abruptly"), (3, "vm", "exit code 1")
    ]  # fmt: skip
    assert next(f.tail for f in console.failures(9)) == (b"[vm:2] step 3\n",)
    assert [f.rank for f in console.failures(0)] == [3]  # a launch that succeeded: no rank vanished


OPEN_MPI_RACE = (  # measured once in CI under load: rank 1 SIGKILLed, rank 0's gloo error reached PRRTE first
    _ctl(Vanished(1, "vm"))
    + b"[vm:0] "
    + _ctl(Failed(0, "exit code 1", "vm"))
    + b'prterun has exited due to process rank 0 with PID 0 on node vm calling\n"abort". This may have caused\n'
    + _ctl(Vanished(0, "vm"))  # PRRTE's clean-up: after the failure, not named
)
OPEN_MPI_CLEANUP = (  # rank 3 failed; PRRTE then killed the others, whose taggers saw them go
    b"[vm:3] " + _ctl(Failed(3, "exit code 1", "vm")) + _ctl(Vanished(2, "vm")) + _ctl(Vanished(0, "vm"))
)


@pytest.mark.parametrize("size", [1, 4096])
def test_under_open_mpi_only_a_rank_that_vanished_before_any_failure_is_named(size: int) -> None:
    console = _console(OutputOptions(tag=True), 4)
    _feed(console, "stderr", OPEN_MPI_RACE, size)
    assert [(f.rank, f.how) for f in console.failures(1)] == [(1, "killed or exited abruptly"), (0, "exit code 1")]
    assert [f.rank for f in console.failures(0)] == [0]  # a launch that succeeded: no rank vanished
    console = _console(OutputOptions(tag=True), 4)
    _feed(console, "stderr", OPEN_MPI_CLEANUP, size)
    assert [f.rank for f in console.failures(1)] == [3]
    console = _console(OutputOptions(tag=True), 4)
    _feed(console, "stderr", HYDRA_KILL, size)  # rank 2 went first, and Open MPI did not name it
    assert [f.rank for f in console.failures(9)] == [2, 3]


OPEN_MPI_LATE_WORD = (  # measured under load: rank 1 SIGKILLed; rank 0's gloo error said first, then rank 1's tagger
    b"[vm:0] "
    + _ctl(Failed(0, "exit code 1", "vm", after_peer=True))
    + b"[vm:0] "
    + _ctl(Failed(0, "called MPI_Abort", "vm"))
    + _ctl(Vanished(1, "vm"))
    + b'prterun has exited due to process rank 0 with PID 0 on node vm calling\n"abort". This may have caused\n'
    + _ctl(Vanished(3, "vm"))  # PRRTE's clean-up: after the first, not named
)


@pytest.mark.parametrize("size", [1, 4096])
def test_under_open_mpi_a_rank_heard_to_vanish_after_a_peers_failure_that_it_caused_is_named_first(size: int) -> None:
    console = _console(OutputOptions(tag=True), 4)
    _feed(console, "stderr", OPEN_MPI_LATE_WORD, size)
    assert [(f.rank, f.how) for f in console.failures(1)] == [(1, "killed or exited abruptly"), (0, "exit code 1")]
    outcome, _ = console.watch.outcome(1)
    assert outcome.after_peer == {0} and outcome.causes() == [1]
    assert outcome.failures() == "rank 1 on vm killed or exited abruptly; rank 0 on vm failed with exit code 1"
    assert describe_end(outcome) == "exit code 1 (rank 1 on vm killed or exited abruptly)"  # the cause alone
    console = _console(OutputOptions(tag=True), 4)  # PRRTE's banner names rank 1 too, with its signal
    _feed(console, "stderr", OPEN_MPI_LATE_WORD.replace(_ctl(Vanished(1, "vm")), (
        b"prterun noticed that process rank 1 with PID 0 on node vm exited on\nsignal 9 (Killed).\n"
    )), size)  # fmt: skip
    assert describe_end(console.watch.outcome(137)[0]) == "exit code 137 (rank 1 on vm killed by SIGKILL)"


def test_a_rank_that_vanished_after_a_failure_of_its_own_cause_is_not_named() -> None:
    console = _console(OutputOptions(tag=True), 4)  # rank 0 failed (no peer's loss), then PRRTE ended rank 1
    _feed(console, "stderr", OPEN_MPI_LATE_WORD.replace(b" after_peer=1", b""), 4096)
    assert [f.rank for f in console.failures(1)] == [0]
    assert describe_end(console.watch.outcome(1)[0]) == "exit code 1 (rank 0 on vm failed with exit code 1)"


def test_when_every_failure_followed_a_peers_loss_they_are_all_named() -> None:
    outcome = LaunchOutcome(1, failed={2: "exit code 1", 0: "exit code 1"}, after_peer=frozenset({0, 2}))
    assert outcome.causes() == [2, 0]  # as the launch ordered them
    assert describe_end(outcome) == "exit code 1 (rank 2 failed with exit code 1; rank 0 failed with exit code 1)"


HYDRA_LOST = (  # MPICH 5.0.2's mpiexec on n1 when everything on n2 was killed (tests/hosts' namespaces)
    b"[mpiexec@n1] control_cb (/mpich-5.0.2/src/pm/hydra/mpiexec/pmiserv_cb.c:280): assert (!closed) failed\n"
    b"[mpiexec@n1] HYDT_dmxu_poll_wait_for_event (/mpich-5.0.2/src/pm/hydra/lib/tools/demux/demux_poll.c:76): "
    b"callback returned error status\n"
)


def test_hydra_losing_a_hosts_proxy_is_a_lost_host_it_does_not_name() -> None:
    watch = MpirunWatch(TOKEN, vanished_named=True)
    watch.feed("stderr", HYDRA_LOST)
    outcome, problem = watch.outcome(255)
    assert outcome.status == 255 and problem == (
        "mpirun lost contact with a remote host (it names none) (its daemon died or the network link was cut), so "
        "the job did not finish (mpirun returned 255); check that every host is up and reachable"
    )
