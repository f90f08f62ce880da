"""A CLI that cannot be misread: no abbreviations, sbatch's short options, counts checked at parse time, typos."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcdist.cli import build_parser, main, other_spellings
from hpcdist.cli.types import Checked

ROOT = Path(__file__).resolve().parents[2]


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """main(argv) must exit 2 with one `hpcdist: error:` line and print nothing else; return that line."""
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("hpcdist: error: ") and err.count("\n") == 1, (out, err)
    return err.removeprefix("hpcdist: error: ").rstrip("\n")


def subparsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every subcommand's parser, by name."""
    top = build_parser()
    (sub,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    yield from sub.choices.items()


# No abbreviations: each of these once meant a longer option; now it launches and measures nothing.
def test_an_abbreviation_launches_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    assert refused(capsys, "mpirun", "--launch", "mpirun", "-np", "1", "--", "touch", str(marker)) == (
        "unknown option --launch for `hpcdist mpirun`; options are never abbreviated: did you mean --launch-agent? "
        "see `hpcdist mpirun --help` for its options"
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "ddp", "--check", "d"],
            "unknown option --check for `hpcdist run`; options are never abbreviated: did you mean --checkpoint-dir? "
            "see `hpcdist run --help` for its options",
        ),
        (
            ["bench", "all_reduce", "--f", "x.json"],
            "unknown option --f for `hpcdist bench`; options are never abbreviated: did you mean --from? "
            "see `hpcdist bench --help` for its options",
        ),
        (
            ["doctor", "--time", "5"],
            "unknown option --time for `hpcdist doctor`; options are never abbreviated: did you mean --timeout? "
            "see `hpcdist doctor --help` for its options",
        ),
        (
            ["sbatch", "--part", "gpu", "--", "x"],
            "unknown option --part for `hpcdist sbatch`; options are never abbreviated: did you mean --partition? "
            "see `hpcdist sbatch --help` for its options",
        ),
        (
            ["mpirun", "-hostf", "h", "--", "x"],
            "unknown option -hostf for `hpcdist mpirun`; options are never abbreviated: did you mean -hostfile? "
            "see `hpcdist mpirun --help` for its options",
        ),
    ],
)
def test_no_parser_takes_an_abbreviation(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert refused(capsys, *argv) == message


def test_bench_from_is_never_guessed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    saved = tmp_path / "x.json"
    saved.write_text("{}")
    refused(capsys, "bench", "--fro", str(saved), "--plot", str(tmp_path / "p.png"))
    assert not (tmp_path / "p.png").exists()


def test_every_parser_refuses_abbreviations() -> None:
    assert not build_parser().allow_abbrev
    for name, parser in subparsers():
        assert not parser.allow_abbrev, name


# sbatch's short options, from `man sbatch`: hpcdist sbatch's mean the same, or do not exist.
SBATCH_SHORT = {
    "-A": "--account",
    "-a": "--array",
    "-B": "--extra-node-info",
    "-b": "--begin",
    "-C": "--constraint",
    "-c": "--cpus-per-task",
    "-D": "--chdir",
    "-d": "--dependency",
    "-e": "--error",
    "-F": "--nodefile",
    "-G": "--gpus",
    "-H": "--hold",
    "-h": "--help",
    "-i": "--input",
    "-J": "--job-name",
    "-k": "--no-kill",
    "-L": "--licenses",
    "-M": "--clusters",
    "-m": "--distribution",
    "-N": "--nodes",
    "-n": "--ntasks",
    "-O": "--overcommit",
    "-o": "--output",
    "-p": "--partition",
    "-Q": "--quiet",
    "-q": "--qos",
    "-S": "--core-spec",
    "-s": "--oversubscribe",
    "-t": "--time",
    "-V": "--version",
    "-v": "--verbose",
    "-W": "--wait",
    "-w": "--nodelist",
    "-x": "--exclude",
}


def test_sbatch_short_options_mean_what_sbatchs_mean() -> None:
    (sbatch,) = [parser for name, parser in subparsers() if name == "sbatch"]
    shorts = {o: a for a in sbatch._actions for o in a.option_strings if len(o) == 2}
    assert shorts, "sbatch has short options"
    for short, action in shorts.items():
        assert short in SBATCH_SHORT and SBATCH_SHORT[short] in action.option_strings, (short, action.option_strings)


def test_sbatch_o_is_the_jobs_output_and_write_is_the_scripts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["sbatch", "-o", "job.out", "-e", "job.err", "--", "x"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --output=job.out\n" in out and "#SBATCH --error=job.err\n" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert main(["sbatch", "-o", "job.out", "--write", "job.sbatch", "--", "x"]) == 0
    assert capsys.readouterr() == ("", "")
    assert (tmp_path / "job.sbatch").read_text() == out.replace("#SBATCH --error=job.err\n", "")


@pytest.mark.parametrize("command", [["hostfile", "--hosts", "a"], ["torchrun", "--", "t.py"]])
def test_the_generators_write_with_write_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    target = tmp_path / "f"
    name = command[0]
    assert refused(capsys, name, "-o", str(target), *command[1:]).startswith(f"unknown option -o for `hpcdist {name}`")
    assert not target.exists()
    assert main([name, "--write", str(target), *command[1:]]) == 0 and target.read_text()


# Every count, duration and size: ASCII digits only, ranges enforced, at parse time (--dry-run, --script too).
@pytest.mark.parametrize("mode", [["--dry-run"], ["--script", "-"]])
@pytest.mark.parametrize("value", ["1_0", "+3", "\uff13", " 3", "3 ", "-3", "0x3", "3.0", "٣"])
def test_np_in_ascii_digits_only(capsys: pytest.CaptureFixture[str], mode: list[str], value: str) -> None:
    assert refused(capsys, "mpirun", *mode, "-np", value, "--", "x") == (
        f"-np {value!r} is not a whole number; write it in ASCII digits 0-9 alone (no sign, blank or '_'), "
        "e.g. -np 1; see `hpcdist mpirun --help`"
    )


@pytest.mark.parametrize("mode", [["--dry-run"], ["--script", "-"]])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-5", "--heartbeat-timeout '-5' is not a number of seconds"),
        ("inf", "--heartbeat-timeout 'inf' is not a number of seconds"),
        ("1e3", "--heartbeat-timeout '1e3' is not a number of seconds"),
        ("9999999", "--heartbeat-timeout must be a positive number of seconds, got 9999999.0"),
    ],
)
def test_heartbeat_timeout_is_checked_without_a_run(
    capsys: pytest.CaptureFixture[str], mode: list[str], value: str, message: str
) -> None:
    assert refused(capsys, "mpirun", *mode, "--heartbeat-timeout", value, "-np", "1", "--", "x").startswith(message)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mpirun", "--dry-run", "-np", "0", "--", "x"], "-np must be at least 1, got 0; e.g. -np 1"),
        (["mpirun", "--dry-run", "--tail", "+1", "-np", "1", "--", "x"], "--tail '+1' is not a whole number"),
        (["mpirun", "--dry-run", "--min-np", "0", "-np", "1", "--", "x"], "--min-np must be at least 1, got 0"),
        (["sbatch", "-N", "1_0", "--", "x"], "--nodes '1_0' is not a whole number"),
        (["sbatch", "--time", "1:00:00:00", "--", "x"], "--time '1:00:00:00' is not a Slurm time"),
        (["sbatch", "--master-port", "0", "--", "x"], "--master-port must be at least 1, got 0"),
        (["torchrun", "--nproc-per-node", "+2", "--", "t.py"], "--nproc-per-node '+2' is not a whole number"),
        (["sbatch", "--omp-num-threads", "0", "--", "x"], "--omp-num-threads must be at least 1, got 0"),
        (["torchrun", "--omp-num-threads", "1_0", "--", "t.py"], "--omp-num-threads '1_0' is not a whole number"),
        (["hostfile", "--hosts", "a", "--slots", "\uff12"], "--slots '\uff12' is not a whole number"),
        (["bench", "all_reduce", "-n", "1_000"], "--iters '1_000' is not a whole number"),
        (["bench", "all_reduce", "-b", " 8"], "--minbytes ' 8' has blanks around it"),
        (["doctor", "--timeout", "+5"], "--timeout '+5' is not a number of seconds"),
        (["status", "1", "--timeout", "0"], "--timeout must be a positive number of seconds, got 0.0"),
        (["logs", "1", "--rank", "-1"], "--rank '-1' is not a whole number"),
        (["run", "p2p", "--timeout", "nan"], "--timeout 'nan' is not a number of seconds"),
        (["run", "ddp", "--epochs", "0"], "--epochs must be at least 1, got 0"),
    ],
)
def test_counts_and_durations_of_every_command(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    err = refused(capsys, *argv)
    assert err.startswith(message) and err.endswith(f"; see `hpcdist {argv[0]} --help`"), err


def test_no_option_bypasses_the_one_check() -> None:
    # every typed option goes through a Checked type; a number-valued default means a Checked type too
    for name, parser in subparsers():
        for action in parser._actions:
            assert action.type in (None,) or isinstance(action.type, Checked), (name, action.option_strings)
            numeric = isinstance(action.default, (int, float)) and not isinstance(action.default, bool)
            assert not numeric or isinstance(action.type, Checked), (name, action.option_strings)


# Unknown options, commands and choices: a "did you mean" from that parser's own names, and its help.
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["mpirun", "--oversubscibe", "-np", "2", "--", "x"],
            "unknown option --oversubscibe for `hpcdist mpirun`; did you mean --oversubscribe? "
            "see `hpcdist mpirun --help` for its options",
        ),
        (
            ["mpirun", "-nps", "2", "--", "x"],
            "unknown option -nps for `hpcdist mpirun`; did you mean -np? see `hpcdist mpirun --help` for its options",
        ),
        (
            ["sbatch", "--ntasks-per-nod=2", "--", "x"],
            "unknown option --ntasks-per-nod for `hpcdist sbatch`; options are never abbreviated: "
            "did you mean --ntasks-per-node? "
            "see `hpcdist sbatch --help` for its options",
        ),
        (["mpirn", "-np", "2"], "unknown command 'mpirn' for `hpcdist`; did you mean mpirun? see `hpcdist --help`"),
        (
            ["sbatch", "--launch", "srn", "--", "x"],
            "argument --launch: unknown value 'srn'; did you mean srun? choose one of srun, mpirun, torchrun; "
            "see `hpcdist sbatch --help`",
        ),
        (
            ["--verison", "env"],
            "unknown option --verison for `hpcdist`; did you mean --version? see `hpcdist --help` for its options",
        ),
        (["env", "extra"], "unexpected argument 'extra' for `hpcdist env`; see `hpcdist env --help`"),
    ],
)
def test_did_you_mean(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert refused(capsys, *argv) == message


def test_the_real_entry_point_says_it_and_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hpcdist", "mpirun", "-nps", "2", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "hpcdist: error: unknown option -nps for `hpcdist mpirun`; did you mean -np? "
        "see `hpcdist mpirun --help` for its options\n"
    )


# torchrun's underscore spellings: every --long-option takes its other spelling, in every command.
def test_every_long_option_takes_its_other_spelling() -> None:
    for name, parser in subparsers():
        spellings = other_spellings(parser)
        for action in parser._actions:
            for option in (o for o in action.option_strings if o.startswith("--") and "-" in o[2:]):
                other = "--" + option[2:].replace("-", "_")
                assert spellings.get(other, parser._option_string_actions.get(other)) is action, (name, option)


@pytest.mark.parametrize(
    ("dashes", "underscores", "status"),
    [
        (
            ["torchrun", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr", "a",
             "--master-port", "1234", "--", "t.py"],
            ["torchrun", "--nproc_per_node=2", "--nnodes", "2", "--node_rank", "1", "--master_addr", "a",
             "--master_port", "1234", "--", "t.py"],
            0,
        ),
        (
            ["sbatch", "--launch", "torchrun", "--master-port", "1234", "--ntasks-per-node", "2", "--", "t.py"],
            ["sbatch", "--launch", "torchrun", "--master_port", "1234", "--ntasks_per_node", "2", "--", "t.py"],
            0,
        ),
        (
            ["mpirun", "--dry-run", "--heartbeat-timeout", "5", "-np", "2", "--", "x"],
            ["mpirun", "--dry_run", "--heartbeat_timeout", "5", "-np", "2", "--", "x"],
            0,
        ),
        (["bench", "ddp", "--warmup-iters", "x"], ["bench", "ddp", "--warmup_iters", "x"], 2),
    ],
)  # fmt: skip
def test_underscores_mean_the_dashes(
    capsys: pytest.CaptureFixture[str], dashes: list[str], underscores: list[str], status: int
) -> None:
    results = []
    for argv in (dashes, underscores):
        results.append((main(argv), *capsys.readouterr()))
    assert results[0] == results[1] and results[0][0] == status and results[0][1 + (status == 2)]


# `examples` belongs to the checkout, not to the user's CLI.
def test_examples_is_no_user_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "examples") == "unknown command 'examples' for `hpcdist`; see `hpcdist --help`"
    help_text = build_parser().format_help()
    assert "examples" not in help_text and "sbatch" in help_text


def test_the_checkouts_examples_module(tmp_path: Path) -> None:
    def examples(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hpcdist.jobs.examples", *argv], capture_output=True, text=True, timeout=60, cwd=cwd
        )

    assert examples(cwd=ROOT).returncode == 0
    elsewhere = examples(cwd=tmp_path)
    assert elsewhere.returncode == 1
    assert elsewhere.stderr.endswith(
        "python -m hpcdist.jobs.examples: regenerate them with `python -m hpcdist.jobs.examples --write`\n"
    )
    assert examples("--bogus", cwd=tmp_path).returncode == 2
