"""The one restart policy, tested once: its rules and lines, as `hpcdist mpirun` and a batch script's loop get them.

POLICY is the table of what happens after an attempt ends with a status. The Python policy is held to it directly,
through the command a script's loop runs (`python -m hpcdist.launching.restarts`), and through a generated sbatch
script's real loop in bash, with a stub mpirun that ends with the table's statuses and a stub `sleep` that notes
its pauses instead of taking them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdist.jobs.sbatch import render_sbatch
from hpcdist.jobs.sbatchspec import SbatchSpec
from hpcdist.launching.restarts import RestartPolicy, main, said, verdict
from hpcdist.launching.world import World
from hpcdist.status import describe_status

MAX = 2
# (attempt index, its status) -> (restart?, the line said, the pause before the next attempt)
POLICY = {
    (0, 1): (True, "hpcdist: attempt 1/3 ended with exit code 1; restarting in 1.0 s", 1),
    (1, 137): (True, "hpcdist: attempt 2/3 ended with exit code 137; restarting in 2.0 s", 2),
    (2, 1): (False, "hpcdist: attempt 3/3 ended with exit code 1; not restarting: --max-restarts 2 used up", None),
    (0, 2): (
        False,
        "hpcdist: attempt 1/3 ended with exit code 2; not restarting: exit status 2 is a usage error; a restart cannot "
        "fix that",
        None,
    ),
    (1, 2): (
        False,
        "hpcdist: attempt 2/3 ended with exit code 2; not restarting: exit status 2 is a usage error; a restart cannot "
        "fix that",
        None,
    ),
}


@pytest.mark.parametrize(("index", "status"), list(POLICY))
def test_the_policy_decides_and_says_as_the_table(index: int, status: int) -> None:
    restart, line, pause = POLICY[index, status]
    policy = RestartPolicy(MAX)
    decision = verdict(status, index, policy)
    assert decision.restart is restart
    assert said(index, policy, describe_status(status), decision) == line
    assert (policy.pause_after(index) if restart else None) == pause


def test_success_ends_the_restarts_without_a_word() -> None:
    assert verdict(0, 0, RestartPolicy(MAX)).restart is False
    assert verdict(0, 0, RestartPolicy(MAX)).why == ""


def test_the_pauses_double_from_one_second_up_to_thirty() -> None:
    assert [RestartPolicy(9).pause_after(index) for index in range(8)] == [1, 2, 4, 8, 16, 30, 30, 30]


class _Streams:
    """A World whose stdout and stderr are kept, to read what the script's command said."""

    def __init__(self, tmp_path: Path) -> None:
        self.out = (tmp_path / "out").open("w+")
        self.err = (tmp_path / "err").open("w+")
        self.world = World(stdout=self.out, stderr=self.err)

    def read(self) -> tuple[str, str]:
        """What was written to stdout and stderr."""
        return Path(self.out.name).read_text(), Path(self.err.name).read_text()


@pytest.mark.parametrize(("index", "status"), list(POLICY))
def test_the_scripts_command_decides_and_says_as_the_table(tmp_path: Path, index: int, status: int) -> None:
    restart, line, pause = POLICY[index, status]
    streams = _Streams(tmp_path)
    assert main([str(index), str(status), str(MAX)], streams.world) == (0 if restart else 1)
    assert streams.read() == (f"{pause}\n" if restart else "", line + "\n")


def test_the_scripts_command_refuses_what_is_not_three_whole_numbers(tmp_path: Path) -> None:
    streams = _Streams(tmp_path)
    assert main(["0", "-1", "2"], streams.world) == 2
    assert streams.read()[1].startswith("usage: python -m hpcdist.launching.restarts ATTEMPT STATUS MAX_RESTARTS")


_STUB = f"""#!{sys.executable}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "log.jsonl"), "a") as log:
    log.write(json.dumps({{"tool": os.path.basename(sys.argv[0]), "argv": sys.argv[1:],
                          "count": os.environ.get("HPCDIST_RESTART_COUNT")}}) + "\\n")
if os.path.basename(sys.argv[0]) == "mpirun":
    statuses = [int(word) for word in os.environ["STATUSES"].split()]
    attempts = sum(1 for line in open(os.path.join(here, "log.jsonl")) if '"tool": "mpirun"' in line)
    sys.exit(statuses[attempts - 1])
"""


@pytest.mark.parametrize("statuses", [[1, 137, 1], [1, 0], [2], [1, 2]])
def test_a_batch_scripts_loop_keeps_the_table(tmp_path: Path, statuses: list[int]) -> None:
    stubs = tmp_path / "stub bin"
    stubs.mkdir()
    for tool in ("mpirun", "sleep"):
        (stubs / tool).write_text(_STUB)
        (stubs / tool).chmod(0o755)
    spec = SbatchSpec(
        program=("train.py",), launch="mpirun", mpirun=str(stubs / "mpirun"), python=sys.executable, max_restarts=MAX
    )
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(spec))
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "STATUSES": " ".join(map(str, statuses)), "LC_ALL": "C.UTF-8"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    log = [json.loads(line) for line in (stubs / "log.jsonl").read_text().splitlines()]
    expected = [POLICY[index, status] for index, status in enumerate(statuses) if status != 0]
    assert done.stderr.splitlines() == [line for _, line, _ in expected]
    assert [float(entry["argv"][0]) for entry in log if entry["tool"] == "sleep"] == [
        pause for restart, _, pause in expected if restart
    ]
    assert [entry["count"] for entry in log if entry["tool"] == "mpirun"] == [str(n) for n in range(len(statuses))]
    assert done.returncode == statuses[-1]
