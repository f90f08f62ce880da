"""torch's own distributed test suite (DistributedTest._DistTestBase) inside this MPI job, as PyTorch once ran it.

PyTorch's CI ran distributed_test.py for its native MPI backend under `mpiexec -n 3` with BACKEND=mpi, every
test in the MPI processes themselves (test_distributed_fork.py: `TestMPIWithFork(TestCase, _DistTestBase)`).
This harness does the same. `hpcdist.init(BACKEND)` picks the backend and rendezvouses: BACKEND=mpi becomes
hpcdist's mpi backend (registered as "mpi4py") on a wheel without native MPI. torch's assertions are
untouched; the harness does, per test, what torch's spawn harness (TestDistBackend._run) does per process:
- a default group of its own, with the suite's timeout for that test (CUSTOM_PG_TIMEOUT), on a fresh store
  prefix: a test that leaves a group broken (gloo's timeout tests do on purpose) cannot reach the next one;
- a fresh file barrier (TEMP_DIR/barrier) and test_dir;
- torch's skips as skips: the suite skips GPU tests with `sys.exit(TEST_SKIPS[...].exit_code)`, which the
  spawn harness reads from the exit code; here SystemExit with one of those codes is a skip;
- one outcome for all ranks: a failure on any rank fails the test; skipped on some ranks only fails too;
- a deadline per test (the hpcdist pytest plugin's deadline thread, re-armed): a hang ends the job with
  every rank's stack.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import unittest
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from unittest import mock

BACKENDS = ("mpi", "gloo")
PG_TIMEOUT = 60.0  # torch's default_pg_timeout in distributed_test.py
DEADLINE_MARGIN = 30.0  # a test's deadline: its group's timeout plus this
_SUBDIRS = ("barrier", "test_dir", "init_dir")  # what torch's initialize_temp_directories() makes
_EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Exit|Timeout)\b")

# Tests torch gates on BACKEND == "gloo" by name although they use nothing hpcdist's backend lacks (coalesced
# all-reduce, DDP's no_sync, an object collective, batched p2p on CPU, a group's timeout), keyed by the exact
# reason torch skips them with under BACKEND=mpi; each has no other skip mark. They run under BACKEND=mpi too;
# a different reason means torch changed the gate, and the tier stops. Not here: sparse all-reduce (hpcdist's
# backend has none), monitored_barrier (torch implements it for gloo only), test_barrier_timeout_global (it
# also needs a file:// init method).
GLOO_GATED = {
    "Test requires backend mpi to be one of {'gloo'}": [
        *(
            f"test_all_reduce_coalesced_{g}{op}"
            for g in ("", "group_", "full_group_")
            for op in ("sum", "product", "min", "max")
        ),
        "test_grads_same_across_ranks_with_no_sync",
        "test_scatter_object_list",
    ],
    "GLOO Batch Send Recv CPU": ["test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags"],
    "Only gloo backend supports timeouts": ["test_barrier_timeout_full_group", "test_barrier_timeout_group"],
}
_TIMEOUTS = "Only gloo backend supports timeouts"


@dataclass(frozen=True)
class Result:
    """The outcome of one torch test, agreed by every rank: passed, failed or skipped."""

    name: str
    outcome: str
    seconds: float
    reason: str = ""


def declare_mpi_capable() -> None:
    """Tell torch's suite that "mpi" can do what torch withholds from its native MPI backend.

    torch's DistTestCases says per backend what the suite may test: its native MPI backend gets no DDP,
    no object collectives on the default group (gated by the "gpu" feature), no subgroups, no
    all_gather_coalesced. hpcdist's backend has all of them, so "mpi" joins those sets (the GPU tests
    among them still skip on a machine without GPUs). Must run before distributed_test is imported: its
    decorators read these sets then.
    """
    from torch.testing._internal.common_distributed import DistTestCases

    for feature in ("ddp", "gpu", "cuda", "subgroup"):
        DistTestCases.backend_feature[feature].add("mpi")
    for backends in DistTestCases.skip_collective.values():
        backends.discard("mpi")


def _unskip_gloo_gated(suite: type[unittest.TestCase]) -> None:
    """Each test in GLOO_GATED becomes a plain method that calls torch's test, without torch's skip mark.

    Not the timeout tests on the compiled mpi backend: a collective past its group's timeout ends the job there
    (a blocking MPI call cannot be abandoned; NCCL's watchdog does the same), so torch's gate stands for them.
    """
    for reason, names in GLOO_GATED.items():
        if reason == _TIMEOUTS and os.environ.get("HPCDIST_MPI_NATIVE", "auto") != "0":
            continue
        for name in names:
            test = getattr(suite, name)
            why = getattr(test, "__unittest_skip_why__", None)
            if why != reason:
                raise RuntimeError(
                    f"torch's {name} was expected to skip with {reason!r} under BACKEND=mpi but says {why!r}; "
                    "update GLOO_GATED in tests/torchsuite/harness.py"
                )
            setattr(suite, name, _plain(test))


def _plain(test: Any) -> Any:
    def method(self: Any) -> Any:
        return test(self)

    method.__name__, method.__doc__ = test.__name__, test.__doc__
    return method


def _suite_class(backend: str) -> type[unittest.TestCase]:
    """torch's _DistTestBase as one TestCase class, imported with BACKEND, WORLD_SIZE and TEMP_DIR set."""
    import torch.distributed as dist

    if backend == "mpi":
        declare_mpi_capable()
        # require_backend_is_available() asks dist.is_mpi_available() while the suite is imported
        with mock.patch.object(dist, "is_mpi_available", return_value=True):
            from torch.testing._internal.distributed import distributed_test
    else:
        from torch.testing._internal.distributed import distributed_test
    from torch.testing._internal.common_utils import TestCase

    class TorchDistributedSuite(TestCase, distributed_test.DistributedTest._DistTestBase):
        """torch's _DistTestBase, run in this rank's process on the default group."""

        @property
        def rank(self) -> int:
            return dist.get_rank()

        @property
        def world_size(self) -> str:  # as torch's TestDistBackend: the WORLD_SIZE string
            return os.environ["WORLD_SIZE"]

        def _handle_test_skip(self, msg: str) -> None:  # torch's hook for harnesses that run tests in-process
            raise unittest.SkipTest(msg)

    if backend == "mpi":
        _unskip_gloo_gated(TorchDistributedSuite)
    return TorchDistributedSuite


class Harness:
    """torch's suite for one backend in this MPI job: `names()` lists its tests, `run(names)` runs them."""

    def __init__(self, backend: str, comm: Any, deadline: Any = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"BACKEND={backend!r}: the torch suite tier runs one of {', '.join(BACKENDS)}")
        import torch.distributed as dist

        import hpcdist

        self.backend, self.comm, self.deadline = backend, comm, deadline
        temp_dir = None
        if comm.rank == 0:
            temp_dir = tempfile.mkdtemp(prefix="hpcdist-torchsuite-")
            for sub in _SUBDIRS:
                os.mkdir(os.path.join(temp_dir, sub))
        # HPCDIST_FORENSICS=0: the hang watchdog would wrap torch.distributed's functions under the suite
        os.environ.update(BACKEND=backend, TEMP_DIR=comm.bcast(temp_dir), HPCDIST_FORENSICS="0")
        os.environ.setdefault("PYTORCH_PRINT_REPRO_ON_FAILURE", "0")
        hpcdist.init(backend=backend, timeout=PG_TIMEOUT)  # sets WORLD_SIZE, which the suite reads at import
        self.torch_backend = str(dist.get_backend())  # "mpi4py" for BACKEND=mpi on a wheel without MPI
        # the store hpcdist.init gave the default group (over MPI for the mpi backend, rank 0's TCP store for gloo)
        default_store = dist.distributed_c10d._get_default_store()
        assert isinstance(default_store, dist.PrefixStore)
        self._store = default_store.underlying_store
        dist.destroy_process_group()  # from here on, every test gets a default group of its own
        self._generation = 0
        self.suite = _suite_class(backend)

    def names(self) -> list[str]:
        """Every test of torch's suite, in unittest's order."""
        return list(unittest.TestLoader().getTestCaseNames(self.suite))

    def run(self, names: list[str], label: str = "") -> list[Result]:
        """Run the named tests on every rank, in order."""
        from torch.testing._internal.distributed.distributed_test import CUSTOM_PG_TIMEOUT

        results = []
        for name in names:
            seconds = CUSTOM_PG_TIMEOUT.get(name, PG_TIMEOUT)
            if self.deadline is not None:
                self.deadline.arm(seconds + DEADLINE_MARGIN, f"{label}{name}")
            self._open(seconds)
            start = time.monotonic()
            result = unittest.TestResult()
            self.suite(name).run(result)
            mine = _outcome(result)
            if mine[0] == "failed":
                print(f"[rank {self.comm.rank}] {name} failed:\n{mine[1]}", file=sys.stderr, flush=True)
            outcome, reason = _agree(self.comm, mine)
            results.append(Result(name, outcome, time.monotonic() - start, reason))
            self._close()
        return results

    def _open(self, seconds: float) -> None:
        """A fresh file barrier and test_dir, and a default group on a store prefix no earlier test used."""
        import torch.distributed as dist
        from torch.testing._internal.distributed.distributed_test import Barrier

        self.comm.Barrier()
        if self.comm.rank == 0:
            for sub in ("barrier", "test_dir"):
                path = os.path.join(os.environ["TEMP_DIR"], sub)
                for name in os.listdir(path):
                    os.unlink(os.path.join(path, name))
        Barrier.barrier_id = 0
        self.comm.Barrier()
        self._generation += 1
        dist.init_process_group(
            self.torch_backend,
            store=dist.PrefixStore(f"torchsuite/{self._generation}/", self._store),
            rank=self.comm.rank,
            world_size=self.comm.size,
            timeout=timedelta(seconds=seconds),
        )

    def _close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def close(self) -> None:
        """Release the rendezvous and remove TEMP_DIR, once every rank is done with it."""
        import hpcdist

        self._close()
        hpcdist.shutdown()
        self.comm.Barrier()
        if self.comm.rank == 0:
            shutil.rmtree(os.environ["TEMP_DIR"], ignore_errors=True)


def _outcome(result: unittest.TestResult) -> tuple[str, str]:
    """(passed|failed|skipped, reason) on this rank; torch's skip exit codes count as skips."""
    from torch.testing._internal.common_distributed import TEST_SKIPS

    skip_codes = {skip.exit_code: skip.message for skip in TEST_SKIPS.values()}
    problems = result.errors + result.failures + [(t, "unexpected success") for t in result.unexpectedSuccesses]
    for _, text in problems:
        code = _exception_line(text).removeprefix("SystemExit:").strip()
        if _exception_line(text).startswith("SystemExit") and code.isdigit() and int(code) in skip_codes:
            return "skipped", skip_codes[int(code)]
    if problems:
        return "failed", problems[0][1]
    if result.skipped:
        return "skipped", str(result.skipped[0][1])
    return "passed", ""


def _exception_line(text: str) -> str:
    """The exception line of a traceback (the last `SomeError: …` line), else its last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line):
            return line
    return lines[-1] if lines else ""


def _agree(comm: Any, outcome: tuple[str, str]) -> tuple[str, str]:
    """One outcome for all ranks: any failure fails; skipped only if every rank skipped."""
    outcomes = comm.allgather(outcome)
    kinds = [kind for kind, _ in outcomes]
    failed = [f"rank {r}: {_exception_line(why)}" for r, (kind, why) in enumerate(outcomes) if kind == "failed"]
    if failed:
        return "failed", "; ".join(failed)
    if len(set(kinds)) > 1:
        return "failed", "ranks disagree: " + ", ".join(f"rank {r} {kind}" for r, kind in enumerate(kinds))
    return kinds[0], outcomes[0][1]
