"""Running the examples of README.md and docs/**/*.md (tests/doc_examples.py parses them) and checking their output.

Each document runs in one fresh working directory per tier, its blocks in order, in a newcomer's environment:
the venv's bin first on PATH (as `source .venv/bin/activate` leaves it), HOME, USER, LANG, TERM and no other
variable of the test process, plus these allowances, never shown in examples:
- OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 when the tests run as root (Open MPI refuses root
  otherwise; a newcomer is not root);
- PYTHONUNBUFFERED=1: a pipe is not a terminal, and without it Python would hold stdout back until exit, out of
  order with stderr (a terminal's line buffering shows the lines as they come);
- in the hosts tier, the launch agent that stands in for ssh between the namespace hosts (tests/hosts/agent), and
  in the cluster tier SLURM_CONF naming the test cluster's configuration. The agent starts so fast that PRRTE
  sometimes loses a race and warns `plm:ssh: Warning: setpgid(…) failed in parent with errno=Permission
  denied(13)`; the hosts tier leaves that one line out (tests/hosts/test_examples_hosts.py);
- the line `hpcdist mpirun` says first when -np is more than the CPUs here (`CROWDED`) is left out: the examples
  show a machine with a CPU for each rank, and the tests run on smaller ones too;
- `venv-mpich` in the working directory, a link to $HPCDIST_MPICH_VENV (else the checkout's .venv-mpich, which
  `make env` makes), standing in for the `python -m venv venv-mpich` and `pip install hpcdist mpich` of
  docs/mpich.md's quick start (networked, slow).
"""

from __future__ import annotations

import difflib
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from doc_examples import EXIT_COMMENT, ROOT, Block, Command, ExampleError, collect, matches, parse, relative
from sybil.evaluators.python import PythonEvaluator

TIMEOUT = 120.0  # seconds for one command or snippet
CROWDED = re.compile(r"hpcdist: -np \d+ is more ranks than the \d+ CPUs this process may run on, .*")
MPICH_VENV_VAR = "HPCDIST_MPICH_VENV"  # names the MPICH venv linked as `venv-mpich` in every working directory


class ExampleFailed(AssertionError):
    """An example ran and did not do what its text shows; the message names FILE:LINE and what differs."""


def collect_or_fail(tier: str) -> list[Block]:
    """collect(tier), a collection error with the runner's message (no traceback) when a document is unrunnable."""
    try:
        return collect(tier)
    except ExampleError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


def newcomer_env(venv: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A newcomer's shell environment with the venv activated, plus the runner's allowances (module docstring)."""
    env = {
        name: os.environ[name] for name in ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TERM") if name in os.environ
    }
    env.update(
        PATH=f"{venv / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        VIRTUAL_ENV=str(venv),
        SHELL="/bin/bash",
        PYTHONUNBUFFERED="1",
    )
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return {**env, **(extra or {})}


@dataclass
class Run:
    """One document's run in one tier: its working directory, the Python namespace, how far it got."""

    blocks: list[Block]
    workdir: Path
    env: dict[str, str]
    wrap: Callable[[list[str]], list[str]]  # argv -> argv as run where the tier runs (a namespace host, the cluster)
    tier: str
    noise: re.Pattern[str] | None = None  # lines of the tier's own making, left out before comparing
    done: int = 0  # blocks[:done] were handled
    failed: str = ""  # FILE:LINE of the document's first example that failed
    namespace: dict[str, object] = field(default_factory=dict)

    def upto(self, block: Block) -> None:
        """Run the document's blocks up to and including `block`: files are written whatever their tier, the
        tier's own examples run (those before `block` too, when a selection left them out). After a failure the
        rest still runs, each failure after it naming the first."""
        index = self.blocks.index(block)
        while self.done <= index:
            current = self.blocks[self.done]
            self.done += 1
            try:
                if current.kind == "file":
                    target = self.workdir / current.title
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(current.source)
                elif current.runs and current.tier == self.tier:
                    self._run(current)
            except ExampleFailed as exc:
                first, self.failed = self.failed, self.failed or current.where
                if first:
                    raise ExampleFailed(f"{exc}\n(the example at {first} failed before it: this may follow)") from None
                raise
            except BaseException:
                self.failed = self.failed or current.where
                raise

    def _run(self, block: Block) -> None:
        """Run a console block's commands or a snippet; ExampleFailed says what differs."""
        if block.kind == "console":
            for command in block.commands:
                code, output = self.run_command(command.text, f"{relative(block.path)}:{command.line}")
                lines = [
                    line
                    for line in output.splitlines()
                    if not (CROWDED.fullmatch(line) or (self.noise and self.noise.fullmatch(line)))
                ]
                check(block, command, code, lines)
        elif self.tier == "docs":
            self._exec(block)
        else:
            code, output = self.run_command(f"python - <<'HPCDIST_SNIPPET'\n{block.source}HPCDIST_SNIPPET", block.where)
            if code != 0:
                raise ExampleFailed(f"{block.where}: the python snippet failed (exit {code}):\n{output}")

    def run_command(self, text: str, where: str) -> tuple[int, str]:
        """Run one command line under bash in the working directory: its exit status and output; a hang is killed
        after TIMEOUT seconds and fails."""
        argv = self.wrap(["bash", "-c", text])
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(
                argv, cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            try:
                code = proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                out.seek(0)
                raise ExampleFailed(
                    f"{where}: `{text}` still ran after {TIMEOUT:g} s and was killed; its output so far:\n"
                    + out.read().decode(errors="replace")
                ) from None
            out.seek(0)
            return code, out.read().decode(errors="replace")

    def _exec(self, block: Block) -> None:
        """Execute a snippet in this process, in the working directory and the newcomer's environment."""
        assert block.example is not None
        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        example = block.example
        example.namespace = self.namespace
        previous = signal.signal(signal.SIGALRM, _snippet_timeout(block))
        signal.setitimer(signal.ITIMER_REAL, TIMEOUT)
        try:
            os.environ.clear()
            os.environ.update(self.env)
            os.chdir(self.workdir)
            PythonEvaluator()(example)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)


def _snippet_timeout(block: Block) -> Callable[[int, object], None]:
    """A SIGALRM handler that fails the snippet with where it is."""

    def handler(signum: int, frame: object) -> None:
        raise ExampleFailed(f"{block.where}: the python snippet still ran after {TIMEOUT:g} s")

    return handler


def check(block: Block, command: Command, code: int, actual: list[str]) -> None:
    """Fail with FILE:LINE, the command, and a diff of expected against actual when they differ."""
    good_output = matches(command.expected, actual, block.unordered)
    if good_output and code == command.status:
        return
    where = f"{relative(block.path)}:{command.line}"
    message = [f"{where}: $ {command.text}"]
    if code != command.status:
        why = (
            "`# exit N` ends the command" if EXIT_COMMENT.search(command.text)
            else "an `hpcdist: error:` line is shown" if command.status == 2
            else "no error is shown and there is no `# exit N`"
        )  # fmt: skip
        message.append(f"exit status {code}, expected {command.status} ({why})")
    if not good_output:
        message.append("output differs (- expected, + actual" + (", both sorted)" if block.unordered else ")"))
        shown = (sorted(command.expected), sorted(actual)) if block.unordered else (list(command.expected), actual)
        message += difflib.unified_diff(*shown, "expected", "actual", lineterm="", n=3)
    else:
        message += ["output:", *actual]
    raise ExampleFailed("\n".join(message))


def run_example(runs_for: Callable[[Block], Run], block: Block) -> None:
    """A tier's test body: run the block after its document's earlier ones; a failure is reported as the runner
    words it, without a traceback."""
    try:
        runs_for(block).upto(block)
    except ExampleFailed as exc:
        message = str(exc)
    else:
        return
    pytest.fail(message, pytrace=False)


def runs(
    wrap: Callable[[list[str]], list[str]],
    tier: str,
    extra_env: Mapping[str, str] | None = None,
    noise: re.Pattern[str] | None = None,
) -> Iterator[Callable[[Block], Run]]:
    """A factory of one Run per document (made when its first example runs), with fresh working directories that
    are removed at the end: a generator to use as a fixture's body."""
    venv = Path(os.environ.get("HPCDIST_VENV") or sys.prefix).resolve()
    mpich_venv = Path(os.environ.get(MPICH_VENV_VAR) or ROOT / ".venv-mpich").resolve()
    made: dict[Path, Run] = {}
    with tempfile.TemporaryDirectory(prefix=f"hpcdist-examples-{tier}-") as tmp:

        def run_for(block: Block) -> Run:
            if block.path not in made:
                workdir = Path(tmp) / re.sub(r"\W", "_", relative(block.path))
                workdir.mkdir()
                (workdir / "venv-mpich").symlink_to(mpich_venv)
                made[block.path] = Run(parse(block.path), workdir, newcomer_env(venv, extra_env), wrap, tier, noise)
            return made[block.path]

        yield run_for
