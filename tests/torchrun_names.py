"""The names torch 2.13's torchrun gives a worker, and the name-by-name comparison of hpcdist's workers with its."""

from __future__ import annotations

# torch/distributed/elastic/agent/server/local_elastic_agent.py _start_workers, elastic/multiprocessing/api.py,
# launcher/api.py and run.py: what torchrun adds to a worker's environment.
TORCHRUN_GIVES = {
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
}
# Left unset by hpcdist, on purpose (README, "The variables a script receives"): no agent reads an error file,
# and the signals are the agent's own setting, which its workers inherit without reading it.
NOT_GIVEN = {"TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE"}
PER_RUN = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}  # checked well-formed, not equal


def assert_same_names(ours: dict[str, str], theirs: dict[str, str], where: str, **expect: str) -> None:
    """One worker's environment under hpcdist against torchrun's: each name torchrun gives (but NOT_GIVEN), no other
    torchrun-like name, and torchrun's value (or `expect`'s) for each name that is not per run."""
    assert set(theirs) >= TORCHRUN_GIVES, f"torchrun's names changed: {sorted(TORCHRUN_GIVES - set(theirs))}"
    named = {n for n in ours if n in TORCHRUN_GIVES or n.startswith(("TORCHELASTIC_", "ROLE_", "GROUP_"))}
    assert named == TORCHRUN_GIVES - NOT_GIVEN, f"{where}: {sorted(named ^ (TORCHRUN_GIVES - NOT_GIVEN))}"
    for name in sorted(TORCHRUN_GIVES - NOT_GIVEN - PER_RUN):
        want = expect.get(name, theirs[name])
        assert ours[name] == want, f"{where}: {name}={ours[name]!r}, torchrun's {want!r}"
