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
