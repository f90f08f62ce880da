"""The plugin under a real mpiexec: agreement, deadlines that end real deadlocks, fixtures, and inertness."""

from __future__ import annotations

import re


def test_a_failure_or_lone_skip_on_one_rank_fails_the_test_on_every_rank(run_pytest) -> None:
    run = run_pytest(
        """
        import pytest
        pytestmark = pytest.mark.mpi

        def test_fine(mpi_comm):
            assert mpi_comm.allreduce(1) == mpi_comm.size

        def test_fails_on_rank_1(mpi_comm):
            assert mpi_comm.rank != 1, "rank 1 is unhappy"

        def test_skips_on_rank_0(mpi_comm):
            if mpi_comm.rank == 0:
                pytest.skip("only rank 0 skips")

        def test_skips_everywhere():
            pytest.skip("nobody runs this")

        @pytest.fixture
        def broken_on_rank_1(mpi_comm):
            if mpi_comm.rank == 1:
                raise RuntimeError("fixture broke on rank 1")

        def test_setup_fails_on_rank_1(broken_on_rank_1, mpi_comm):
            mpi_comm.Barrier()  # would hang on rank 0 if rank 1 skipped the call phase alone

        @pytest.mark.xfail(reason="known bug on rank 0")
        def test_xfail_on_rank_0(mpi_comm):
            assert mpi_comm.rank != 0
    """,
        2,
        "--with-mpi",
        "-rA",
    )
    assert run.returncode != 0, run.output
    for rank in (0, 1):
        seen = run.outcomes(rank)
        assert seen[("test_fine", "call")] == "passed"
        assert seen[("test_fails_on_rank_1", "call")] == "failed"
        assert seen[("test_skips_on_rank_0", "call")] == "failed"
        assert seen[("test_skips_everywhere", "call")] == "skipped"
        assert seen[("test_setup_fails_on_rank_1", "setup")] == "failed"
        assert ("test_setup_fails_on_rank_1", "call") not in seen
        assert seen[("test_xfail_on_rank_0", "call")] == "xfailed"
    assert "call failed on rank 1 of 2 (rank 1: AssertionError: rank 1 is unhappy)" in run.output
    assert "call skipped on rank 0 of 2 but not on the others" in run.output
    assert "setup failed on rank 1 of 2 (rank 1: RuntimeError: fixture broke on rank 1)" in run.output


_DEADLOCK = """
    import pytest
    pytestmark = pytest.mark.mpi

    def test_before(mpi_comm):
        mpi_comm.Barrier()

    @pytest.mark.mpi_deadline(8)
    def test_deadlock(mpi_comm):
        if mpi_comm.rank == 0:
            mpi_comm.recv(source=1, tag=77)  # OFFENDING-RECV: nobody sends this
        else:
            mpi_comm.Barrier()  # OFFENDING-BARRIER: rank 0 never joins

    def test_after():
        pass
"""


def test_a_real_deadlock_ends_the_job_with_every_ranks_stack(run_pytest) -> None:
    run = run_pytest(_DEADLOCK, 4, "--with-mpi")
    assert run.returncode != 0, run.output
    # Start-up of 4 pytest ranks on 2 shared cores takes a few seconds; the deadline is 8 s, the grace 4 s.
    assert run.seconds < 8 + 4 + 30, run.output
    assert "hpcdist: MPI test deadline" in run.output
    assert "deadline of test_throwaway.py::test_deadlock" in run.output
    assert "stacks of 4 of 4 ranks" in run.output
    assert re.search(r"\[rank 0\]\s+mpi_comm\.recv\(source=1, tag=77\)  # OFFENDING-RECV", run.output), run.output
    for rank in (1, 2, 3):
        assert re.search(rf"\[rank {rank}\]\s+mpi_comm\.Barrier\(\)  # OFFENDING-BARRIER", run.output), run.output
    assert "MPI_Abort 70" in run.output
    assert ("test_after", "call") not in run.outcomes(0)  # the job ended; nothing ran on after the hang


def test_a_rank_stuck_holding_the_gil_is_reported_from_faulthandler(run_pytest) -> None:
    run = run_pytest(
        """
        import ctypes
        import pytest

        @pytest.mark.mpi_deadline(5)
        def test_gil_held(mpi_comm):
            if mpi_comm.rank == 1:
                ctypes.PyDLL(None).sleep(600)  # a C call that keeps the GIL: rank 1's watchdog thread cannot run
            mpi_comm.Barrier()
    """,
        2,
        "--mpi-agree",
    )
    assert run.returncode != 0, run.output
    assert run.seconds < 5 + 4 + 30, run.output
    assert "rank 1 (its Python thread never ran: stuck in a C call holding the GIL" in run.output
    assert re.search(r'\[rank 1\]\s+File ".*test_throwaway.py", line 8 in test_gil_held', run.output), run.output
    assert re.search(r"\[rank 0\]\s+mpi_comm\.Barrier\(\)", run.output), run.output


def test_fixtures_agree_across_ranks(run_pytest) -> None:
    run = run_pytest(
        """
        import os
        import pytest
        from mpi4py import MPI

        pytestmark = pytest.mark.mpi
        seen = []

        def test_fixtures(launch_env, mpi_comm, shared_tmp_path, rank_device):
            assert mpi_comm is not MPI.COMM_WORLD
            assert MPI.Comm.Compare(mpi_comm, MPI.COMM_WORLD) == MPI.CONGRUENT
            launched = (launch_env.launcher, launch_env.rank, launch_env.world_size)
            assert launched == ("openmpi", mpi_comm.rank, mpi_comm.size)
            assert str(rank_device) == "cpu"
            assert len(set(mpi_comm.allgather(str(shared_tmp_path)))) == 1
            (shared_tmp_path / f"from-{mpi_comm.rank}").write_text("x")
            mpi_comm.Barrier()
            assert sorted(os.listdir(shared_tmp_path)) == [f"from-{r}" for r in range(mpi_comm.size)]
            seen.append(mpi_comm)

        def test_each_test_gets_its_own_communicator(mpi_comm):
            assert seen and seen[0] == MPI.COMM_NULL  # freed after the first test
    """,
        2,
        "--with-mpi",
    )
    assert run.returncode == 0, run.output
    for rank in (0, 1):
        assert set(run.outcomes(rank).values()) == {"passed"}


def test_without_mpi_the_plugin_imports_neither_mpi4py_nor_torch(run_pytest) -> None:
    run = run_pytest(
        """
        import sys

        def test_nothing_heavy_was_imported(request):
            assert request.config.pluginmanager.has_plugin("hpcdist")
            assert not request.config.pluginmanager.has_plugin("hpcdist-mpi-session")
            assert "mpi4py" not in sys.modules and "torch" not in sys.modules

        def test_launch_env_works_without_mpi(launch_env):
            assert (launch_env.launcher, launch_env.rank, launch_env.world_size) == ("single", 0, 1)
    """,
        None,
    )
    assert run.returncode == 0, run.output
    assert "2 passed" in run.output


def test_no_mpi_agree_turns_it_off_even_with_with_mpi(run_pytest) -> None:
    run = run_pytest(
        """
        def test_off(request):
            assert not request.config.pluginmanager.has_plugin("hpcdist-mpi-session")
    """,
        1,
        "--with-mpi",
        "--no-mpi-agree",
    )
    assert run.returncode == 0, run.output


def test_a_single_rank_run_is_active_and_passes(run_pytest) -> None:
    run = run_pytest(
        """
        import pytest
        pytestmark = pytest.mark.mpi

        def test_on(request, mpi_comm):
            assert request.config.pluginmanager.has_plugin("hpcdist-mpi-session")
            assert mpi_comm.size == 1
    """,
        1,
        "--with-mpi",
    )
    assert run.returncode == 0, run.output
