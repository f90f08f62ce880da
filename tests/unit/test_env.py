"""Tests for hpcdist.runtime.env: launcher detection from plain environment dicts."""

from __future__ import annotations

import pytest
from nccl_roots import nccl_roots

from hpcdist.errors import UsageError
from hpcdist.runtime.env import AGENT_VARIABLES, AgentFacts, LaunchEnv, sources, torch_defaults

FIELDS = (
    "launcher",
    "rank",
    "world_size",
    "local_rank",
    "local_world_size",
    "node_rank",
    "master_addr",
    "master_port",
    "nodelist",
    "job_id",
    "step_id",
)


def ompi(rank: int, size: int, local: int, local_size: int) -> dict[str, str]:
    """Open MPI 5 (prterun) variables; NODE_RANK is the rank among this node's processes."""
    return {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(size),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
        "OMPI_COMM_WORLD_NODE_RANK": str(local),
        "PMIX_RANK": str(rank),
    }


def srun(rank: int, size: int, local: int, node: int, tasks_per_node: str = "2(x2)", step: str = "0") -> dict[str, str]:
    """The variables srun sets for one task of a step, inside a job from sbatch."""
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_ID": step,
        "SLURM_STEPID": step,
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": str(size),
        "SLURM_NPROCS": str(size),
        "SLURM_LOCALID": str(local),
        "SLURM_NODEID": str(node),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_TASKS_PER_NODE": tasks_per_node,
        "SLURM_STEP_NODELIST": "gpu[01-02]",
        "SLURM_JOB_NODELIST": "gpu[01-02]",
    }


# a rank of Cray PALS's `mpiexec -n 8 --ppn 4` on two nodes (docs/schedulers.md); PALS counts no nodes
PALS_RANK = {
    "PALS_RANKID": "5",
    "PALS_LOCAL_RANKID": "1",
    "PALS_NODEID": "1",
    "PMI_RANK": "5",
    "PMI_SIZE": "8",
    "PMI_LOCAL_SIZE": "4",
}
TORCHRUN = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "node01",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "none",
}
BATCH = {
    "SLURM_JOB_ID": "4242",
    "SLURM_PROCID": "0",
    "SLURM_NTASKS": "4",
    "SLURM_NODEID": "0",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_JOB_NODELIST": "gpu[01-02]",
}

DETECT = [
    pytest.param({}, ("single", 0, 1, 0, 1, None, None, None, (), None, None), id="single"),
    pytest.param(
        {"MASTER_ADDR": "n1", "MASTER_PORT": "1234"},
        ("single", 0, 1, 0, 1, None, "n1", 1234, (), None, None),
        id="single-master",
    ),
    pytest.param(TORCHRUN, ("torchrun", 5, 8, 1, 4, 1, "node01", 29500, (), None, None), id="torchrun"),
    pytest.param(
        {"RANK": "0", "WORLD_SIZE": "1"},
        ("torchrun", 0, 1, 0, 1, None, None, None, (), None, None),
        id="torchrun-one-process-no-local",
    ),
    # 2 nodes x 2 ranks, rank 3 is the second rank of the second node: LOCAL_RANK != RANK.
    pytest.param(
        ompi(3, 4, 1, 2), ("openmpi", 3, 4, 1, 2, None, None, None, (), None, None), id="openmpi-2x2-pmix-agrees"
    ),
    # Open MPI 5 on one node: NODE_RANK 0..3 is the on-node rank, never the node index.
    pytest.param(
        ompi(2, 4, 2, 4),
        ("openmpi", 2, 4, 2, 4, None, None, None, (), None, None),
        id="openmpi-node-rank-not-node-index",
    ),
    pytest.param(
        {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"},
        ("mpich", 2, 4, 0, 2, None, None, None, (), None, None),
        id="mpich",
    ),
    pytest.param(
        {
            "MV2_COMM_WORLD_RANK": "3",
            "MV2_COMM_WORLD_SIZE": "4",
            "MV2_COMM_WORLD_LOCAL_RANK": "1",
            "MV2_COMM_WORLD_LOCAL_SIZE": "2",
        },
        ("mvapich2", 3, 4, 1, 2, None, None, None, (), None, None),
        id="mvapich2",
    ),
    pytest.param(
        srun(3, 4, 1, 1), ("slurm", 3, 4, 1, 2, 1, None, None, ("gpu01", "gpu02"), "4242", "0"), id="srun-2x2"
    ),
    pytest.param(
        srun(4, 5, 0, 2, "2(x2),1") | {"SLURM_STEP_NODELIST": "gpu[01-02],cpu7"},
        ("slurm", 4, 5, 0, 1, 2, None, None, ("gpu01", "gpu02", "cpu7"), "4242", "0"),
        id="srun-uneven-tasks-per-node",
    ),
    pytest.param(
        {k: v for k, v in srun(1, 4, 1, 0).items() if k not in ("SLURM_STEP_ID", "SLURM_NTASKS")},
        ("slurm", 1, 4, 1, 2, 0, None, None, ("gpu01", "gpu02"), "4242", "0"),
        id="srun-old-names-STEPID-NPROCS",
    ),
    # srun --mpi=pmix of an Open MPI program: all three sources agree; Slurm adds the node index.
    pytest.param(
        srun(3, 4, 1, 1) | ompi(3, 4, 1, 2),
        ("openmpi", 3, 4, 1, 2, 1, None, None, ("gpu01", "gpu02"), "4242", "0"),
        id="srun-pmix-openmpi",
    ),
    # srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE without the local pair: Slurm supplies it.
    pytest.param(
        srun(3, 4, 1, 1) | {"PMI_RANK": "3", "PMI_SIZE": "4"},
        ("mpich", 3, 4, 1, 2, 1, None, None, ("gpu01", "gpu02"), "4242", "0"),
        id="srun-pmi2",
    ),
    # A shim copied the MPI values into torch's variables: they agree, and the launcher is still Open MPI.
    pytest.param(
        ompi(3, 4, 1, 2) | {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
        ("openmpi", 3, 4, 1, 2, None, None, None, (), None, None),
        id="shim-agrees-with-openmpi",
    ),
    # sbatch script (batch pseudo-step, or no step id at all): ONE process despite SLURM_NTASKS=4.
    pytest.param(
        BATCH | {"SLURM_STEP_ID": "4294967294"},
        ("single", 0, 1, 0, 1, None, None, None, (), "4242", None),
        id="sbatch-batch-step",
    ),
    pytest.param(
        BATCH | {"SLURM_STEP_ID": "batch"},
        ("single", 0, 1, 0, 1, None, None, None, (), "4242", None),
        id="sbatch-batch-name",
    ),
    pytest.param(BATCH, ("single", 0, 1, 0, 1, None, None, None, (), "4242", None), id="sbatch-no-step-id"),
    pytest.param(
        srun(0, 1, 0, 0, "1", step="4294967290"),
        ("single", 0, 1, 0, 1, None, None, None, (), "4242", None),
        id="salloc-interactive-step",
    ),
    # mpirun inside sbatch: the app inherits the prted daemon step (1 task per remote node).
    pytest.param(
        srun(0, 1, 0, 0, "1") | ompi(3, 4, 1, 2),
        ("openmpi", 3, 4, 1, 2, None, None, None, (), "4242", None),
        id="mpirun-in-sbatch-daemon-step",
    ),
    # torchrun under srun (one agent task per node): Slurm/PMIx describe the agent, not the worker.
    pytest.param(
        srun(1, 2, 0, 1, "1(x2)") | TORCHRUN | {"PMIX_RANK": "1"},
        ("torchrun", 5, 8, 1, 4, 1, "node01", 29500, (), "4242", None),
        id="torchrun-under-srun",
    ),
]


@pytest.mark.parametrize(("environ", "expected"), DETECT)
def test_from_environ(environ: dict[str, str], expected: tuple) -> None:
    env = LaunchEnv.from_environ(environ)
    assert tuple(getattr(env, f) for f in FIELDS) == expected


PLACE = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def role(rank: int, size: int, restart: int = 0, most: int = 0) -> dict[str, str]:
    """What torchrun's agent adds for its one role "default" and its restart counters."""
    return {
        "ROLE_NAME": "default",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(size),
        "TORCHELASTIC_RESTART_COUNT": str(restart),
        "TORCHELASTIC_MAX_RESTARTS": str(most),
    }


def place(*values: int) -> dict[str, str]:
    """RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE."""
    return dict(zip(PLACE, map(str, values), strict=True))


@pytest.mark.parametrize(
    ("environ", "facts", "expected"),
    [
        pytest.param({}, None, place(0, 1, 0, 1) | role(0, 1), id="single"),
        pytest.param(
            {},
            AgentFacts((0, 1), "hpcdist-x", True),
            place(0, 1, 0, 1)
            | role(0, 1)
            | {"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1"}
            | {"TORCHELASTIC_RUN_ID": "hpcdist-x", "TORCHELASTIC_USE_AGENT_STORE": "True"},
            id="single-hosted",
        ),
        pytest.param(
            ompi(3, 4, 1, 2) | {"MASTER_ADDR": "gpu01", "MASTER_PORT": "29501"},
            None,
            place(3, 4, 1, 2) | role(3, 4) | {"MASTER_ADDR": "gpu01", "MASTER_PORT": "29501"},
            id="openmpi-no-hosts",
        ),
        pytest.param(
            ompi(3, 4, 1, 2) | {"HPCDIST_RESTART_COUNT": "2", "HPCDIST_MAX_RESTARTS": "5", "HPCDIST_RUN_ID": "abc"},
            AgentFacts((1, 2), "hpcdist-rank0s", True),
            place(3, 4, 1, 2)
            | role(3, 4, 2, 5)
            | {"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}
            | {"TORCHELASTIC_RUN_ID": "hpcdist-abc", "TORCHELASTIC_USE_AGENT_STORE": "True"},
            id="openmpi-hosts-restarts-launch-run-id",
        ),
        pytest.param(
            ompi(1, 4, 0, 2),
            AgentFacts(None, "hpcdist-r", False),
            place(1, 4, 0, 2)
            | role(1, 4)
            | {"TORCHELASTIC_RUN_ID": "hpcdist-r", "TORCHELASTIC_USE_AGENT_STORE": "False"},
            id="openmpi-place-unknown",
        ),
        pytest.param(
            srun(3, 4, 1, 1),
            AgentFacts(None, None, False),
            place(3, 4, 1, 2)
            | role(3, 4)
            | {"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}
            | {"TORCHELASTIC_RUN_ID": "hpcdist-4242", "TORCHELASTIC_USE_AGENT_STORE": "False"},
            id="srun-node-id-and-job-run-id",
        ),
        pytest.param(
            PALS_RANK,
            AgentFacts((1, 2), "hpcdist-r", True),
            place(5, 8, 1, 4)
            | role(5, 8)
            | {"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}
            | {"TORCHELASTIC_RUN_ID": "hpcdist-r", "TORCHELASTIC_USE_AGENT_STORE": "True"},
            id="pals-node-id-and-the-rendezvous-node-count",
        ),
        pytest.param(
            PALS_RANK,
            AgentFacts((0, 1), "hpcdist-r", True),  # the rendezvous saw one host: PALS_NODEID=1 does not fit it
            place(5, 8, 1, 4)
            | role(5, 8)
            | {"GROUP_RANK": "1"}
            | {"TORCHELASTIC_RUN_ID": "hpcdist-r", "TORCHELASTIC_USE_AGENT_STORE": "True"},
            id="pals-node-id-and-a-count-that-does-not-fit",
        ),
        pytest.param(
            TORCHRUN | {"HPCDIST_RESTART_COUNT": "3"},
            AgentFacts((0, 1), "hpcdist-y", False),
            place(5, 8, 1, 4) | {"GROUP_RANK": "1", "MASTER_ADDR": "node01", "MASTER_PORT": "29500"},
            id="torchrun-agent-sets-the-rest",
        ),
    ],
)
def test_torch_env(environ: dict[str, str], facts: AgentFacts | None, expected: dict[str, str]) -> None:
    assert LaunchEnv.from_environ(environ).torch_env(facts) == expected


def test_agent_variables_name_all_that_torch_env_sets() -> None:
    """The doctor's probe jobs drop AGENT_VARIABLES: a launch with every fact known sets exactly those."""
    full = LaunchEnv.from_environ(ompi(3, 4, 1, 2)).torch_env(AgentFacts((1, 2), "hpcdist-r", True))
    assert set(full) | {"MASTER_ADDR", "MASTER_PORT"} == set(AGENT_VARIABLES)


def test_echo_of_hpcdist_run_id_is_no_agent() -> None:
    """A shim's own variables, read again by the program's hpcdist.init, give the same dict and the MPI launcher."""
    first = LaunchEnv.from_environ(ompi(3, 4, 1, 2))
    echoed = dict(ompi(3, 4, 1, 2), **first.torch_env(AgentFacts((1, 2), "hpcdist-r", True)))
    again = LaunchEnv.from_environ(echoed)
    assert again.launcher == "openmpi" and (again.node_rank, again.node_count) == (1, 2)
    assert again.torch_env() == {
        k: v for k, v in echoed.items() if k in again.torch_env() and not k.startswith(("OMPI_", "PMIX_"))
    }
    assert LaunchEnv.from_environ(echoed | {"TORCHELASTIC_RUN_ID": "none"}).launcher == "torchrun"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "THP_MEM_ALLOC_ENABLE": "1", "TORCH_NCCL_RANKS_PER_ROOT": "128"}),
        (
            ompi(0, 4, 0, 2),
            {
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
                "OMP_NUM_THREADS": "1",
                "THP_MEM_ALLOC_ENABLE": "1",
                "TORCH_NCCL_RANKS_PER_ROOT": "128",
            },
        ),
        (
            ompi(0, 4, 0, 2)
            | {
                "OMP_NUM_THREADS": "3",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
                "THP_MEM_ALLOC_ENABLE": "0",
                "TORCH_NCCL_RANKS_PER_ROOT": "7",
            },
            {},
        ),
        # torchrun's agent sets the others, never these two
        (TORCHRUN, {"THP_MEM_ALLOC_ENABLE": "1", "TORCH_NCCL_RANKS_PER_ROOT": "128"}),
    ],
)
def test_torch_defaults_leave_set_values(environ: dict[str, str], expected: dict[str, str]) -> None:
    assert torch_defaults(LaunchEnv.from_environ(environ), environ) == expected


def test_restart_count_above_maximum_is_refused() -> None:
    with pytest.raises(UsageError, match="HPCDIST_RESTART_COUNT=3 is out of range for HPCDIST_MAX_RESTARTS=2"):
        LaunchEnv.from_environ({"HPCDIST_RESTART_COUNT": "3", "HPCDIST_MAX_RESTARTS": "2"})


def test_describe_rows_in_fixed_order() -> None:
    rows = LaunchEnv.from_environ(srun(3, 4, 1, 1) | {"MASTER_PORT": "29500"}).describe()
    assert rows == [
        ("launcher", "slurm"),
        ("rank", "3"),
        ("world_size", "4"),
        ("local_rank", "1"),
        ("local_world_size", "2"),
        ("node_rank", "1"),
        ("master_addr", "-"),
        ("master_port", "29500"),
        ("nodelist", "gpu01,gpu02"),
        ("job_id", "4242"),
        ("step_id", "0"),
        ("node_count", "2"),
        ("restart_count", "0"),
        ("max_restarts", "0"),
        ("run_id", "hpcdist-4242"),
    ]


@pytest.mark.parametrize(
    ("launcher", "expected"),
    [
        ("openmpi", True),
        ("mpich", True),
        ("mvapich2", True),
        ("torchrun", False),
        ("slurm", False),
        ("single", False),
    ],
)
def test_is_mpi(launcher: str, expected: bool) -> None:
    assert LaunchEnv(launcher, 0, 1, 0, 1, None, None, None).is_mpi is expected


def test_sources_are_in_precedence_order() -> None:
    assert [s.launcher for s in sources()] == [
        *("torchrun", "openmpi", "pals", "mvapich2", "mpich"),  # the MPI families, by their order
        *("flux", "kubeflow-trainer", "jsrun", "slurm"),  # the schedulers' task launchers
        "pmix",
    ]


def without(environ: dict[str, str], *names: str) -> dict[str, str]:
    """`environ` with `names` removed."""
    return {k: v for k, v in environ.items() if k not in names}


MPICH = {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
MV2 = {
    "MV2_COMM_WORLD_RANK": "3",
    "MV2_COMM_WORLD_SIZE": "4",
    "MV2_COMM_WORLD_LOCAL_RANK": "1",
    "MV2_COMM_WORLD_LOCAL_SIZE": "2",
}

ERRORS = [
    # Half-present sets.
    pytest.param({"RANK": "0"}, ["RANK is set but WORLD_SIZE is not"], id="torchrun-no-world-size"),
    pytest.param({"WORLD_SIZE": "2"}, ["WORLD_SIZE is set but RANK is not"], id="torchrun-no-rank"),
    pytest.param({"TORCHELASTIC_RUN_ID": "x"}, ["TORCHELASTIC_RUN_ID is set but RANK is not"], id="torchrun-marker"),
    pytest.param({"GROUP_RANK": "0"}, ["GROUP_RANK is set but RANK is not"], id="torchrun-group-rank-only"),
    pytest.param(
        without(TORCHRUN, "LOCAL_WORLD_SIZE"),
        ["LOCAL_RANK is set but LOCAL_WORLD_SIZE is not"],
        id="torchrun-no-local-world-size",
    ),
    pytest.param(
        without(TORCHRUN, "LOCAL_RANK"), ["LOCAL_WORLD_SIZE is set but LOCAL_RANK is not"], id="torchrun-no-local-rank"
    ),
    pytest.param(
        {"RANK": "1", "WORLD_SIZE": "2"},
        ["RANK and WORLD_SIZE are set but LOCAL_RANK and LOCAL_WORLD_SIZE"],
        id="torchrun-multi-rank-no-local",
    ),
    pytest.param(
        without(ompi(3, 4, 1, 2), "OMPI_COMM_WORLD_SIZE"),
        ["OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"],
        id="openmpi-no-size",
    ),
    pytest.param(
        without(ompi(3, 4, 1, 2), "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ["OMPI_COMM_WORLD_LOCAL_RANK is set but OMPI_COMM_WORLD_LOCAL_SIZE is not"],
        id="openmpi-no-local-size",
    ),
    pytest.param(without(MPICH, "PMI_SIZE"), ["PMI_RANK is set but PMI_SIZE is not"], id="mpich-no-size"),
    pytest.param(without(MPICH, "PMI_RANK"), ["PMI_SIZE is set but PMI_RANK is not"], id="mpich-no-rank"),
    pytest.param(
        without(MPICH, "MPI_LOCALNRANKS"),
        ["MPI_LOCALRANKID is set but MPI_LOCALNRANKS is not"],
        id="mpich-no-local-size",
    ),
    pytest.param(
        without(MPICH, "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
        ["PMI_RANK and PMI_SIZE are set but MPI_LOCALRANKID and MPI_LOCALNRANKS are not"],
        id="mpich-no-local-pair",
    ),
    pytest.param(
        without(MV2, "MV2_COMM_WORLD_SIZE"),
        ["MV2_COMM_WORLD_RANK is set but MV2_COMM_WORLD_SIZE is not"],
        id="mvapich2-no-size",
    ),
    pytest.param(
        without(MV2, "MV2_COMM_WORLD_LOCAL_RANK"),
        ["MV2_COMM_WORLD_LOCAL_SIZE is set but MV2_COMM_WORLD_LOCAL_RANK is not"],
        id="mvapich2-no-local-rank",
    ),
    pytest.param(
        without(srun(3, 4, 1, 1), "SLURM_NTASKS", "SLURM_NPROCS"),
        ["SLURM_PROCID is set but SLURM_NTASKS is not"],
        id="srun-no-ntasks",
    ),
    pytest.param(
        without(srun(3, 4, 1, 1), "SLURM_PROCID"), ["SLURM_NTASKS is set but SLURM_PROCID is not"], id="srun-no-procid"
    ),
    pytest.param(
        without(srun(3, 4, 1, 1), "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
        ["SLURM_LOCALID is set but SLURM_STEP_TASKS_PER_NODE is not"],
        id="srun-no-tasks-per-node",
    ),
    pytest.param(
        without(srun(3, 4, 1, 1), "SLURM_NODEID"),
        ["SLURM_STEP_TASKS_PER_NODE is set but SLURM_NODEID is not"],
        id="srun-no-nodeid",
    ),
    pytest.param(
        {"PMIX_RANK": "0"}, ["PMIX_RANK=0 is set but no launcher variable gives the world size"], id="pmix-alone"
    ),
    # Disagreement between present sources.
    pytest.param(
        ompi(3, 4, 1, 2) | {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
        ["launcher variables disagree: RANK=0 but OMPI_COMM_WORLD_RANK=3", "unset the stale torchrun", "LOCAL_RANK"],
        id="stale-torchrun-rank",
    ),
    pytest.param(
        ompi(3, 4, 1, 2) | {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
        ["WORLD_SIZE=8 but OMPI_COMM_WORLD_SIZE=4"],
        id="stale-torchrun-world-size",
    ),
    pytest.param(
        ompi(3, 4, 1, 2) | {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
        ["LOCAL_RANK=0 but OMPI_COMM_WORLD_LOCAL_RANK=1"],
        id="stale-torchrun-local-rank",
    ),
    pytest.param(
        ompi(3, 4, 1, 2) | {"PMIX_RANK": "2"}, ["OMPI_COMM_WORLD_RANK=3 but PMIX_RANK=2"], id="openmpi-vs-pmix"
    ),
    pytest.param(
        srun(3, 4, 1, 1) | ompi(2, 4, 0, 2), ["OMPI_COMM_WORLD_RANK=2 but SLURM_PROCID=3"], id="openmpi-vs-srun"
    ),
    pytest.param(
        srun(3, 4, 1, 1) | ompi(3, 4, 1, 3),
        ["OMPI_COMM_WORLD_LOCAL_SIZE=3 but SLURM_STEP_TASKS_PER_NODE[1]=2"],
        id="openmpi-vs-srun-local-size",
    ),
    pytest.param(
        srun(3, 4, 1, 1)
        | {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"},
        ["GROUP_RANK=0 but SLURM_NODEID=1"],
        id="shim-vs-srun-node",
    ),
    # Non-integers and out-of-range values.
    pytest.param({"RANK": "one", "WORLD_SIZE": "2"}, ["RANK='one' is not a non-negative integer"], id="non-int"),
    pytest.param({"RANK": "0", "WORLD_SIZE": "2.0"}, ["WORLD_SIZE='2.0' is not"], id="non-int-float"),
    pytest.param({"RANK": "-1", "WORLD_SIZE": "2"}, ["RANK='-1' is not a non-negative integer"], id="negative"),
    pytest.param(
        ompi(3, 4, 1, 2) | {"OMPI_COMM_WORLD_LOCAL_RANK": ""}, ["OMPI_COMM_WORLD_LOCAL_RANK='' is not"], id="empty"
    ),
    pytest.param(TORCHRUN | {"GROUP_RANK": "x"}, ["GROUP_RANK='x' is not"], id="non-int-group-rank"),
    pytest.param(srun(3, 4, 1, 1) | {"SLURM_NODEID": "n1"}, ["SLURM_NODEID='n1' is not"], id="non-int-nodeid"),
    pytest.param(
        ompi(4, 4, 1, 2), ["OMPI_COMM_WORLD_RANK=4 is out of range for OMPI_COMM_WORLD_SIZE=4"], id="rank-equals-size"
    ),
    pytest.param({"RANK": "0", "WORLD_SIZE": "0"}, ["WORLD_SIZE='0' must be at least 1"], id="zero-world"),
    pytest.param(
        MPICH | {"MPI_LOCALRANKID": "2"},
        ["MPI_LOCALRANKID=2 is out of range for MPI_LOCALNRANKS=2"],
        id="local-rank-out-of-range",
    ),
    pytest.param(
        MV2 | {"MV2_COMM_WORLD_LOCAL_SIZE": "8"},
        ["MV2_COMM_WORLD_LOCAL_SIZE=8 is out of range for MV2_COMM_WORLD_SIZE=4"],
        id="local-size-too-big",
    ),
    pytest.param(
        srun(3, 4, 1, 2),
        ["SLURM_NODEID=2 is out of range for SLURM_STEP_TASKS_PER_NODE=2(x2)"],
        id="srun-nodeid-out-of-range",
    ),
    pytest.param(
        srun(3, 4, 1, 1, "2(x2"),
        ["SLURM_STEP_TASKS_PER_NODE='2(x2' is not a Slurm tasks-per-node list"],
        id="srun-bad-tasks-per-node",
    ),
    pytest.param(
        srun(3, 4, 1, 1) | {"SLURM_STEP_NODELIST": "gpu[01-"},
        ["SLURM_STEP_NODELIST='gpu[01-' is not a valid Slurm nodelist"],
        id="srun-bad-nodelist",
    ),
    pytest.param({"MASTER_PORT": "http"}, ["MASTER_PORT='http' is not a TCP port"], id="port-non-int"),
    pytest.param({"MASTER_PORT": "0"}, ["MASTER_PORT='0' is not a TCP port"], id="port-zero"),
    pytest.param({"MASTER_PORT": "65536"}, ["MASTER_PORT='65536' is not a TCP port"], id="port-too-big"),
    pytest.param({"MASTER_ADDR": " "}, ["MASTER_ADDR is set but empty"], id="addr-empty"),
]


@pytest.mark.parametrize(("environ", "fragments"), ERRORS)
def test_usage_errors(environ: dict[str, str], fragments: list[str]) -> None:
    with pytest.raises(UsageError) as info:
        LaunchEnv.from_environ(environ)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_launch_env_is_frozen() -> None:
    env = LaunchEnv.from_environ({})
    with pytest.raises(AttributeError):
        env.rank = 1  # type: ignore[misc]


def test_intel_mpi_ranks_under_sbatch_ignore_the_proxies_slurm_step() -> None:
    """Intel MPI's Hydra (-launcher slurm) passes the batch script's SLURM_NTASKS=4 to its ranks over its proxies'
    step (2 tasks, one per node): SLURM_STEP_NUM_TASKS tells the step apart, so PMI_RANK is the rank (measured)."""
    step = srun(1, 4, 0, 1, "1(x2)") | {"SLURM_NPROCS": "2", "SLURM_STEP_NUM_TASKS": "2"}
    hydra = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    env = LaunchEnv.from_environ(step | hydra)
    assert (env.launcher, env.rank, env.world_size, env.local_rank, env.local_world_size) == ("mpich", 3, 4, 1, 2)


@pytest.mark.parametrize(
    ("world", "roots", "first"),
    [(8, 1, [0]), (128, 1, [0]), (129, 2, [0, 65]), (10_000, 79, [0, 127, 254]), (100_000, 782, [0, 128, 256])],
)
def test_nccl_ranks_per_root_is_torchs_128_at_every_size_and_a_users_value_stays(
    world: int, roots: int, first: list[int]
) -> None:
    """Every rank of a job of any size gets 128, torch's default, and with it the roots the docs count (one up to 128
    ranks, ceil(N / 128) above); a value the user set is kept as it is."""
    environ = ompi(world - 1, world, 0, 1)
    per_root = int(torch_defaults(LaunchEnv.from_environ(environ), environ)["TORCH_NCCL_RANKS_PER_ROOT"])
    assert per_root == 128
    assert len(nccl_roots(world, per_root)) == roots and nccl_roots(world, per_root)[: len(first)] == first
    assert nccl_roots(7, 3) == [0, 3, 5]  # NCCL's own example: 3 ids over 7 ranks, roots 0, 3 and 5
    mine = environ | {"TORCH_NCCL_RANKS_PER_ROOT": "1"}
    assert "TORCH_NCCL_RANKS_PER_ROOT" not in torch_defaults(LaunchEnv.from_environ(mine), mine)


@pytest.mark.parametrize("value", ["0", "-1", "abc", "", "2147483648", "1.5"])
def test_a_ranks_per_root_torch_cannot_use_is_refused_in_one_line(value: str) -> None:
    environ = ompi(0, 4, 0, 2) | {"TORCH_NCCL_RANKS_PER_ROOT": value}
    with pytest.raises(UsageError) as refused:
        torch_defaults(LaunchEnv.from_environ(environ), environ)
    assert str(refused.value) == (
        f"TORCH_NCCL_RANKS_PER_ROOT={value!r} in this rank's environment is not a whole number from 1 to 2147483647, "
        "and torch divides each nccl group's ranks by it; set it to e.g. 128 (torch's default) or unset it"
    )
