"""Other launchers' options (torchrun, mpirun, srun, sbatch) given to hpcdist mpirun or sbatch: refused at once,
with exit status 2 and the hpcdist spelling, which the command really takes."""

from __future__ import annotations

import argparse
import re

import pytest

from hpcdist.cli import build_parser, main
from hpcdist.cli.habits import MPIRUN, SBATCH

CASES = [("mpirun", option) for option in MPIRUN] + [("sbatch", option) for option in SBATCH]
_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def own_options(command: str) -> set[str]:
    """Every option string the hpcdist subcommand takes."""
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {o for action in sub.choices[command]._actions for o in action.option_strings}


@pytest.mark.parametrize(("command", "option"), CASES)
def test_another_launcher_s_option_is_refused_with_the_spelling_here(
    capsys: pytest.CaptureFixture[str], command: str, option: str
) -> None:
    assert main([command, option, "2", "--", "python", "train.py"]) == 2
    out, err = capsys.readouterr()
    prefix = f"hpcdist: error: {option} is not an option of `hpcdist {command}`: "
    assert out == "" and err.startswith(prefix) and err.count("\n") == 1, err
    advice = err[len(prefix) :]
    named = set(_OPTION.findall(advice)) & own_options(command)
    assert named or re.search(r"\bdrop\b|\bcd\b|after --", advice), f"{option}: names no option of hpcdist {command}"


def test_torchrun_s_underscore_spelling_gets_the_same_advice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mpirun", "--nproc_per_node=2", "--", "python", "train.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcdist: error: --nproc_per_node is not an option of `hpcdist mpirun`: torchrun's ")
    assert "-np N here" in err


def test_an_option_no_launcher_has_still_gets_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sbatch", "--gpus-per-nod", "4", "--", "python", "train.py"]) == 2
    assert "did you mean --gpus-per-node?" in capsys.readouterr().err


def test_sbatch_s_options_hpcdist_does_not_model_go_into_the_script_as_they_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["sbatch", "-N", "2", "--mail-type=END", "--mail_user", "me@x.org", "--dependency", "afterok:42"]
    assert main([*argv, "--hold", "--nice=5", "--comment", "a b", "--", "python", "train.py", "--hold"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("#SBATCH")]
    assert lines == [
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --mail-type=END",
        "#SBATCH --mail-user=me@x.org",
        "#SBATCH --dependency=afterok:42",
        "#SBATCH --hold",
        "#SBATCH --nice=5",
        '#SBATCH --comment="a b"',
    ]
    assert "train.py --hold" in out  # after --: the program's own


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mail-type", "--", "x"], "--mail-type needs a value, as sbatch's --mail-type does"),
        (["--wrap=hostname", "--", "x"], "unknown option --wrap for `hpcdist sbatch`"),
        (["--partition=a", "--signal=B:USR1@60", "--requeue", "--", "x"], "--signal is one hpcdist sbatch writes"),
    ],
)
def test_sbatch_options_that_cannot_pass_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["sbatch", *argv]) == 2
    assert message in capsys.readouterr().err
