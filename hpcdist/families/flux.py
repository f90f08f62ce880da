"""Flux's `flux run` as the launcher: its command line inside a Flux instance, and its lines about a failed task.

From flux-core's manuals (flux-run(1), its job-param-common, job-param-perres and job-environment parts, and
flux-shell-options(7)): `-N NODES --tasks-per-node=N` runs N tasks on each of NODES whole nodes (-N without --cores
asks for them exclusively: its python/flux/cli/base.py), the nodes and N from `-np` and `--map-by ppr:N:node`.
Tasks are placed in blocks, a node's together, as `hpcdist.schedulers.flux` needs to tell a task's node (hpcdist
never passes --taskmap). `-o cpu-affinity=` binds: `off` for `--bind-to none`, `per-task` (the node's cores divided
among its tasks) for `core`. GPUs keep the shell's default, `gpu-affinity=on`: every task sees all the job's GPUs of
its node and takes the one at LOCAL_RANK. `-o exit-on-error` ends the job at once when the first task to exit
failed; without it the shell waits `exit-timeout` (30 s by default) after the first exit before ending the job. flux
run copies its own environment into the job, and its `--env=NAME=VALUE` expands `$name` and mustache templates in
the value, so the values hpcdist passes are set by `env` before flux run instead. Its status is the largest of its
tasks' (128 + the signal for a task killed by one).

Its lines on a failed task, from flux-core's source (src/shell/doom.c, src/cmd/job/attach.c, src/common/libjob/job.c):
    0.532s: flux-shell[0]: FATAL: task-exit: python3: task rank 1 on host node2 failed (Killed) and exit-on-error is set
    0.532s: job.exception ƒ2Rz4GHd type=exec severity=0 python3: task rank 1 on host node2 failed (Killed) and …
    flux-job: task(s) exited with exit code 1           (or `flux-job: task(s) Killed` for 128 + SIGKILL)
`shell rank N on host H failed` in their place says a node's job shell was lost. flux run passes SIGTERM, SIGHUP,
SIGALRM, SIGUSR1 and SIGUSR2 on to every task, and cancels the job on a second Ctrl-C within 2 s (one only says so).
"""

from __future__ import annotations

import signal
from typing import ClassVar

from ..errors import UsageError
from ..plugins import LazyPattern
from . import register
from .base import Family, HostLost, MpirunSpec, Observation, RankKilled, Scanner, check_job_launch, per_node

__all__ = ["FluxRun"]

_AFFINITY = {"none": "off", "core": "per-task"}  # mpirun's --bind-to: the shell's cpu-affinity
_FAILED = (
    r".+?: (?P<what>task|shell) rank (?P<rank>\d+) on host (?P<host>\S+) failed(?: \((?P<how>[^)]*)\))? "
    r"and exit-on-error is set"
)
_EXCEPTION = LazyPattern(rf"\d+\.\d+s: job\.exception \S+ type=exec severity=0 {_FAILED}")
_FATAL = LazyPattern(rf"\d+\.\d+s: flux-shell\[\d+\]: FATAL: task-exit: {_FAILED}")
_ENDED = LazyPattern(r"flux-job: task\(s\) (?:exited with exit code \d+|[A-Z][\w ]*)")
_SIGNALS = {signal.strsignal(s): int(s) for s in signal.valid_signals() if signal.strsignal(s)}  # "Killed": 9


class FluxScanner(Scanner):
    """flux run's word of the first failed task: killed by a signal, or its node's shell lost."""

    def scan(self, stream: str, line: str) -> list[Observation]:
        """What one line says (its job.exception line: the shell's FATAL line says the same again)."""
        failed = _EXCEPTION.fullmatch(line.strip())
        if failed is None:
            return []
        if failed["what"] == "shell":
            return [HostLost(failed["host"])]
        killed = _SIGNALS.get(failed["how"] or "")
        return [] if killed is None else [RankKilled(int(failed["rank"]), failed["host"], killed)]


@register
class FluxRun(Family):
    """Flux's flux run, which starts one task per rank on the nodes of the Flux instance it runs in."""

    name = "flux"
    title = "Flux's flux run"
    order = 94
    launcher_names: ClassVar[tuple[str, ...]] = ("flux",)
    program: ClassVar[str | None] = "flux"
    job_hosts = "Flux"
    ends_job: ClassVar[int] = signal.SIGHUP  # passed on to every task, whose default is to end; one SIGINT only warns

    def command(self, spec: MpirunSpec) -> list[str]:
        """`flux run` for `spec`, the values it passes set by `env` before it.

        Raises:
            UsageError: no -np or --map-by ppr:N:node, a binding the shell has no cpu-affinity for, --mca, or what
                `check_job_launch` refuses.
        """
        check_job_launch(spec, self.title, ("--mca", bool(spec.mca)))
        if spec.bind_to not in _AFFINITY:
            raise UsageError(
                f"--bind-to {spec.bind_to!r} has no flux run cpu-affinity; use one of {', '.join(_AFFINITY)}"
            )
        nodes, each = per_node(spec, self.title)
        values = [f"{name}={value}" for name, value in spec.env if value is not None]
        argv = [*(["env", *values] if values else []), spec.mpirun, "run", "-N", str(nodes), f"--tasks-per-node={each}"]
        argv += ["-o", f"cpu-affinity={_AFFINITY[spec.bind_to]}", "-o", "exit-on-error"]
        return argv + list(spec.extra) + list(spec.program)

    def scanner(self) -> Scanner:
        """A reader of flux run's lines."""
        return FluxScanner()

    def hides(self, text: str) -> bool:
        """flux run's lines on a failed task and the job's status: the summary says them."""
        line = text.strip()
        return any(pattern.fullmatch(line) for pattern in (_EXCEPTION, _FATAL, _ENDED))
