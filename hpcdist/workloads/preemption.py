"""Stopping at a step boundary on preemption: SIGTERM/SIGUSR1 set a flag, the ranks agree on it, and leave.

Slurm's requeue and scancel send SIGTERM to the job's steps (and `--signal=B:USR1@90` a warning first); a
training loop that checks `Preemption.agree()` every few steps stops on the same step on every rank, saves,
and raises `Preempted`, which exits with status 0 so the requeued job resumes from the checkpoint.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["PREEMPT_SIGNALS", "Preempted", "Preemption"]

PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # scontrol requeue / scancel send SIGTERM to the steps


class Preempted(SystemExit):
    """Every rank stopped on a preemption signal and the checkpoint (if any) is saved: exit status 0."""

    def __init__(self, epoch: int, step: int, path: Path | None) -> None:
        super().__init__(0)
        self.epoch, self.step, self.path = epoch, step, path


class Preemption:
    """SIGTERM/SIGUSR1 set a flag; `agree()` all-reduces it (MAX), so every rank stops at the same step.

    The handlers are installed on entry and the previous ones put back on exit. The flag travels in an
    all-reduce every CHECK_EVERY steps and on every epoch's last step, so all ranks see it at the same
    step even when the signal reaches them at different times.
    """

    def __init__(self, device: torch.device) -> None:
        self.device, self.signal, self.agreed = device, 0, False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Preemption:
        if threading.current_thread() is threading.main_thread():  # signal.signal works there only
            for number in PREEMPT_SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _handle(self, number: int, _frame: object) -> None:
        if not self.signal:
            self.signal = number
            os.write(
                2,
                f"hpcdist: ddp: got {signal.Signals(number).name}; stopping at the next step boundary "
                "to checkpoint\n".encode(),
            )

    def agree(self) -> bool:
        """True on every rank once any rank has been signalled (a collective: all ranks must call it together)."""
        flag = torch.tensor([1 if self.signal else 0], dtype=torch.int32, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self.agreed = bool(flag.item())
        return self.agreed
