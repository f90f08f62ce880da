"""Stopping at a step boundary on preemption: SIGTERM/SIGUSR1 set a flag, the ranks agree on it, and leave.

Slurm's requeue and scancel send SIGTERM to the job's steps (and `--signal=B:USR1@90` a warning first); a
training loop that asks `should_stop(step)` every step stops on the same step on every rank (the flag
travels in an all-reduce every `every` steps), saves its checkpoint, and calls `exit()`, which ends the
program with status 0 so that the requeued or restarted job resumes from it. `restart_count` says
which attempt this is under `hpcdist mpirun --max-restarts` (or torchrun, or the sbatch restart loop).
Public as `hpcdist.StopAtStepBoundary`; torch is imported only when the ranks agree.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..contract import RESTART_VARS, RankContract
from ..runtime.process import current

__all__ = ["PREEMPT_SIGNALS", "Preempted", "StopAtStepBoundary", "restart_count"]

PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # scontrol requeue / scancel send SIGTERM to the steps


class Preempted(SystemExit):
    """Every rank stopped at a step boundary on a preemption signal, its checkpoint saved: exit status 0."""

    def __init__(self, epoch: int | None = None, step: int | None = None, path: Path | None = None) -> None:
        super().__init__(0)
        self.epoch, self.step, self.path = epoch, step, path


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """Which attempt this is, 0 first: hpcdist mpirun's (its contract's `restart_count`), else torchrun's
    (TORCHELASTIC_RESTART_COUNT), else 0. `environ`: read there instead of this process's contract and environment.

    Raises:
        UsageError: hpcdist's counter is no whole number.
    """
    contract = current().contract if environ is None else RankContract.from_environ(environ)
    if contract.restart_count is not None:
        return contract.restart_count
    value = (os.environ if environ is None else environ).get(RESTART_VARS[1], "").strip()
    return int(value) if value.isdigit() else 0


class StopAtStepBoundary:
    """SIGTERM/SIGUSR1 set a flag; `should_stop` all-reduces it (MAX), so every rank stops at the same step.

    Use it as a context manager: the handlers are installed on entry and the previous ones put back on
    exit. Every rank must call `should_stop` with the same steps (it is a collective on the steps where
    it agrees); `device` is where the flag's tensor lives (default: the current CUDA device under nccl,
    else the CPU).
    """

    def __init__(
        self,
        every: int = 8,
        *,
        device: Any = None,
        signals: Sequence[int] = PREEMPT_SIGNALS,
        label: str = "",
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1 (agree every N steps), got {every}")
        self.every, self.device, self.signals, self.label = every, device, tuple(signals), label
        self.signal = 0  # the first signal this rank got, 0 while none
        self.stopping = False  # the ranks agreed to stop
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopAtStepBoundary:
        if threading.current_thread() is threading.main_thread():  # signal.signal works there only
            for number in self.signals:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _handle(self, number: int, _frame: object) -> None:
        if not self.signal:
            self.signal = number
            who = f"hpcdist: {self.label}:" if self.label else "hpcdist:"
            os.write(2, f"{who} got {signal.Signals(number).name}; stopping at the next step boundary\n".encode())

    @property
    def restart_count(self) -> int:
        """Which attempt this is, 0 first (see `restart_count`): resume from the checkpoint when it is above 0."""
        return restart_count()

    @property
    def signal_name(self) -> str:
        """The signal that stopped the job on this rank, e.g. 'SIGTERM' ('another rank's signal' when none did)."""
        return signal.Signals(self.signal).name if self.signal else "another rank's signal"

    def should_stop(self, step: int | None = None) -> bool:
        """True on every rank, at the same step, once any rank got a signal.

        A collective when `step` is None or a multiple of `every` (every rank must call it there); on other
        steps it returns at once what was agreed last.
        """
        if step is not None and step % self.every != 0:
            return self.stopping
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            self.stopping = bool(self.signal)
            return self.stopping
        device = self.device
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
        flag = torch.tensor([1 if self.signal else 0], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self.stopping = bool(flag.item())
        return self.stopping

    def exit(self, epoch: int | None = None, step: int | None = None, path: Path | None = None) -> NoReturn:
        """Leave the program with status 0 (raises Preempted, a SystemExit); call it once the checkpoint is saved."""
        raise Preempted(epoch, step, path)
