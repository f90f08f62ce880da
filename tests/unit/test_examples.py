"""The example files in hostfiles/, slurm/ and templates/ must be exactly what the bundled templates render."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_render import check_script

from hpcdist.hosts import HostSlots
from hpcdist.jobs.examples import EXAMPLES, check_examples, render_examples, write_examples
from hpcdist.launching.hostfile import parse_hostfile, read_hostfile_text

ROOT = Path(__file__).resolve().parents[2]


def test_no_example_file_drifts_from_the_templates() -> None:
    problems = check_examples(str(ROOT))
    assert not problems, "\n".join(problems) + "\nregenerate with: make examples"


def test_localhost_stays_what_make_demo_uses() -> None:
    path = str(ROOT / "hostfiles/localhost")
    assert parse_hostfile(read_hostfile_text(path), path) == (HostSlots("localhost", 4),)
    assert "localhost slots=4\n" in (ROOT / "hostfiles/localhost").read_text()


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p.startswith("slurm/")])
def test_example_scripts_pass_bash_n_and_shellcheck(path: str, tmp_path: Path) -> None:
    check_script(render_examples()[path], tmp_path)


def test_the_examples_cover_the_four_jobs_and_three_hostfiles() -> None:
    assert {p for p in EXAMPLES if p.startswith("slurm/")} == {
        "slurm/cpu-mpi.sbatch",
        "slurm/ddp-srun.sbatch",
        "slurm/ddp-torchrun.sbatch",
        "slurm/requeue.sbatch",
    }
    assert {"hostfiles/localhost", "hostfiles/two-node", "hostfiles/two-node-mpich"} <= set(EXAMPLES)


def test_drift_is_reported_and_only_write_fixes_it(tmp_path: Path) -> None:
    # the checkout's example files (its templates/README.md is its own, not rendered)
    checkout = sorted(
        str(path.relative_to(ROOT))
        for folder in ("hostfiles", "slurm", "templates")
        for path in (ROOT / folder).iterdir()
        if path.name != "README.md"
    )
    assert len(checkout) == 17
    assert check_examples(str(tmp_path)) == [f"{path} is missing" for path in checkout]  # nothing written by a check
    assert not (tmp_path / "slurm").exists()
    assert sorted(write_examples(str(tmp_path))) == checkout
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file()) == checkout
    assert all((tmp_path / path).read_text() == (ROOT / path).read_text() for path in checkout)
    assert check_examples(str(tmp_path)) == [] and write_examples(str(tmp_path)) == []
    (tmp_path / "slurm/ddp-srun.sbatch").write_text("edited by hand\n")
    (tmp_path / "hostfiles/stray").write_text("n1 slots=1\n")
    assert check_examples(str(tmp_path)) == [
        "slurm/ddp-srun.sbatch differs from what the templates render",
        "hostfiles/stray is not an example hpcdist renders; add it to hpcdist/jobs/examples.py or remove it",
    ]


def test_the_top_level_templates_are_the_bundled_ones() -> None:
    bundled = {p: t for p, t in render_examples().items() if p.startswith("templates/")}
    assert bundled and all((ROOT / p).read_text() == t for p, t in bundled.items())
    assert (ROOT / "templates/README.md").is_file()
