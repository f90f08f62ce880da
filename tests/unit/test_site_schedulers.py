"""PBS, Grid Engine, LSF and Flux, and Cray PALS's mpiexec: each one's variables and host files as its documentation
gives them, mapped onto torchrun's; and hpcdist mpirun inside their jobs running on the job's hosts.

The variables are exactly those the launchers' documentation lists: PALS, ALCF's user guides (Polaris
running-jobs/using-gpus, Aurora running-jobs) and HPE's Slurm `mpi/cray_shasta` plug-in; jsrun, the OLCF Summit
guide and Lightning's LSFEnvironment; Flux, flux-core's flux-environment(7); PBS_NODEFILE, OpenPBS pbs_resources(7B);
PE_HOSTFILE, Son of Grid Engine 8.1.9's sge_pe(5); LSB_MCPU_HOSTS, the LSF admin guide ("About parallel jobs").
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from hpcdist import families, schedulers
from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.families.base import MpirunSpec, RankKilled
from hpcdist.hosts import HostSlots as H
from hpcdist.launching.mpirun import build_mpirun_argv
from hpcdist.launching.options import MpirunOptions
from hpcdist.launching.plan import LaunchPlan, plan
from hpcdist.launching.world import World
from hpcdist.records import replace
from hpcdist.runtime.env import LaunchEnv
from hpcdist.schedulers.flux import resource_hosts

# Polaris, `mpiexec -n 8 --ppn 4` on 2 nodes, rank 5 (the second node's second rank), Cray's PMI
PALS = {
    "PALS_RANKID": "5",
    "PALS_LOCAL_RANKID": "1",
    "PALS_NODEID": "1",
    "PALS_DEPTH": "8",
    "PALS_APID": "8f1c2d4e-0000-4b5c-9d6e-1a2b3c4d5e6f",
    "PMI_RANK": "5",
    "PMI_SIZE": "8",
    "PMI_LOCAL_RANK": "1",
    "PMI_LOCAL_SIZE": "4",
}
# Summit, `jsrun -n2 -a6 -c42 -g6 -r1` (12 tasks, 6 a node), task 9; Spectrum MPI (Open MPI) sets its own beside
JSRUN = {
    "LSB_JOBID": "779469",
    "JSM_NAMESPACE_RANK": "9",
    "JSM_NAMESPACE_SIZE": "12",
    "JSM_NAMESPACE_LOCAL_RANK": "3",
    "JSM_NAMESPACE_LOCAL_SIZE": "6",
    "OMPI_COMM_WORLD_RANK": "9",
    "OMPI_COMM_WORLD_SIZE": "12",
    "OMPI_COMM_WORLD_LOCAL_RANK": "3",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "6",
}
# `flux run -N2 -n8`, task 6, with Flux's simple PMI
FLUX = {
    "FLUX_TASK_RANK": "6",
    "FLUX_TASK_LOCAL_ID": "2",
    "FLUX_JOB_SIZE": "8",
    "FLUX_JOB_NNODES": "2",
    "FLUX_JOB_ID": "ƒM7Zq9AKHno",
    "FLUX_URI": "local:///tmp/flux-x/local-0",
    "PMI_RANK": "6",
    "PMI_SIZE": "8",
    "PMI_FD": "7",
}


def _torch(environ: dict[str, str]) -> dict[str, str]:
    env = LaunchEnv.from_environ(environ).torch_env()
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE")
    return {k: env[k] for k in keys if k in env}


def test_a_pals_rank_gets_torchruns_variables() -> None:
    assert _torch(PALS) == {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
    }
    assert LaunchEnv.from_environ(PALS).launcher == "pals"
    # PALS_LOCAL_SIZE (PALS's own, where Cray's PMI is off) counts the node's ranks as PMI_LOCAL_SIZE does
    assert _torch({**PALS, "PALS_LOCAL_SIZE": "4"})["LOCAL_WORLD_SIZE"] == "4"


def test_a_jsrun_task_gets_torchruns_variables() -> None:
    assert _torch(JSRUN) == {"RANK": "9", "WORLD_SIZE": "12", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "6"}
    only_jsm = {k: v for k, v in JSRUN.items() if not k.startswith("OMPI_")}  # jsrun --smpiargs off
    assert LaunchEnv.from_environ(only_jsm).launcher == "jsrun"
    assert _torch(only_jsm) == _torch(JSRUN) and LaunchEnv.from_environ(only_jsm).job_id == "779469"


# the Kubeflow Trainer's torch runtime, node 2 of a 4-node TrainJob (kubeflow/trainer's torch plug-in)
TRAINER = {
    "PET_NNODES": "4",
    "PET_NPROC_PER_NODE": "1",
    "PET_NODE_RANK": "2",
    "PET_MASTER_ADDR": "train-node-0-0.train",
    "PET_MASTER_PORT": "29400",
}


def test_a_trainjob_nodes_program_without_torchrun_is_its_one_rank_with_the_trainers_rendezvous() -> None:
    assert _torch(TRAINER) == {
        "RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "2",
        "GROUP_WORLD_SIZE": "4",
    }  # fmt: skip
    env = LaunchEnv.from_environ(TRAINER)
    assert (env.launcher, env.master_addr, env.master_port) == ("kubeflow-trainer", "train-node-0-0.train", 29400)


def test_more_than_one_process_per_trainjob_node_is_torchruns_to_start() -> None:
    with pytest.raises(UsageError, match=r"^PET_NPROC_PER_NODE='4': the Kubeflow Trainer asks for that many "):
        LaunchEnv.from_environ({**TRAINER, "PET_NPROC_PER_NODE": "4"})
    # under torchrun (the TrainJob `hpcdist trainjob` writes) the worker's own variables say its place
    worker = {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "2"}
    env = LaunchEnv.from_environ({**TRAINER, "PET_NPROC_PER_NODE": "4", **worker, "TORCHELASTIC_RUN_ID": "t"})
    assert (env.launcher, env.rank, env.local_rank, env.node_rank) == ("torchrun", 9, 1, 2)


def test_a_flux_task_gets_its_node_from_the_block_placement() -> None:
    assert _torch(FLUX) == {
        "RANK": "6",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "2",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
    }
    assert LaunchEnv.from_environ(FLUX).job_id == "ƒM7Zq9AKHno"
    without_pmi = {k: v for k, v in FLUX.items() if not k.startswith("PMI_")}  # flux run -o pmi=off
    assert LaunchEnv.from_environ(without_pmi).launcher == "flux" and _torch(without_pmi) == _torch(FLUX)


def test_cray_pmis_size_alone_does_not_say_pals() -> None:
    """MPICH's Hydra and Flux set PMI_SIZE too: only PALS's own variables say PALS started the rank."""
    hydra = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    assert LaunchEnv.from_environ(hydra).launcher == "mpich"


@pytest.mark.parametrize(
    ("environ", "needle"),
    [
        ({**PALS, "PMI_RANK": "4"}, "launcher variables disagree: PALS_RANKID=5 but PMI_RANK=4"),
        ({**PALS, "PALS_LOCAL_RANKID": "4"}, "PALS_LOCAL_RANKID=4 is out of range for PMI_LOCAL_SIZE=4"),
        ({**JSRUN, "OMPI_COMM_WORLD_RANK": "8"}, "disagree: OMPI_COMM_WORLD_RANK=8 but JSM_NAMESPACE_RANK=9"),
        ({**FLUX, "FLUX_JOB_SIZE": "7", "PMI_SIZE": "7"}, "not the same number on each"),
        ({**FLUX, "FLUX_TASK_LOCAL_ID": "1"}, "drop flux run's --taskmap"),
        ({**FLUX, "FLUX_JOB_NNODES": "0"}, "FLUX_JOB_NNODES='0' is not a node count"),
        ({k: v for k, v in PALS.items() if not k.startswith("PMI_")}, "PALS_RANKID is set but PMI_SIZE is not"),
    ],
)
def test_contradictory_or_missing_variables_are_a_clear_error_naming_them(environ: dict[str, str], needle: str) -> None:
    with pytest.raises(UsageError) as caught:
        LaunchEnv.from_environ(environ)
    assert needle in str(caught.value), caught.value


# -- the jobs' hosts ------------------------------------------------------------------------------------------------


def _hosts(name: str, environ: dict[str, str], files: dict[str, str]) -> tuple[H, ...]:
    return schedulers.lookup(name).hosts(environ, read=files.__getitem__)


def test_pbs_nodefile_lists_a_chunks_host_once_for_each_of_its_mpiprocs() -> None:
    # qsub -l select=2:ncpus=64:mpiprocs=4 -l place=scatter: each host 4 times, in the chunks' order
    text = "x3006c0s1b0n0\n" * 4 + "x3006c0s1b1n0\n" * 4
    assert _hosts(
        "pbs", {"PBS_NODEFILE": "/var/spool/pbs/aux/1234.pbs01"}, {"/var/spool/pbs/aux/1234.pbs01": text}
    ) == (
        H("x3006c0s1b0n0", 4),
        H("x3006c0s1b1n0", 4),
    )
    # select=1:ncpus=8 + place=pack of a second chunk on the same host: its lines add up
    assert _hosts("pbs", {"PBS_NODEFILE": "f"}, {"f": "n1\nn2\nn1\n\n"}) == (H("n1", 2), H("n2", 1))


def test_pe_hostfile_sums_a_hosts_slots_over_its_queues() -> None:
    text = "node12 16 all.q@node12 UNDEFINED\nnode13 8 all.q@node13 UNDEFINED\nnode12 4 gpu.q@node12 0,0:0,1\n"
    assert _hosts("gridengine", {"PE_HOSTFILE": "/tmp/pe"}, {"/tmp/pe": text}) == (H("node12", 20), H("node13", 8))


def test_lsf_hosts_from_its_host_file_else_from_lsb_mcpu_hosts() -> None:
    environ = {"LSB_JOBID": "7", "LSB_DJOB_HOSTFILE": "/tmp/h", "LSB_MCPU_HOSTS": "hostA 2 hostB 2"}
    assert _hosts("lsf", environ, {"/tmp/h": "hostA\nhostA\nhostB\nhostB\n"}) == (H("hostA", 2), H("hostB", 2))
    assert schedulers.lookup("lsf").hosts({"LSB_JOBID": "7", "LSB_MCPU_HOSTS": "hostA 4 hostB 4"}) == (
        H("hostA", 4),
        H("hostB", 4),
    )


def test_an_mpijobs_launcher_reads_its_workers_from_the_host_file_mpi_operator_mounts() -> None:
    """mpi-operator's host file: `slots=N` for Open MPI, `:N` for Intel MPI and MPICH, one line per worker pod."""
    workers = "train-worker-0.train.default.svc", "train-worker-1.train.default.svc"
    openmpi = "".join(f"{w} slots=4\n" for w in workers)
    environ = {"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile"}
    assert _hosts("kubernetes", environ, {"/etc/mpi/hostfile": openmpi}) == tuple(H(w, 4) for w in workers)
    hydra = {"K_MPI_JOB_ROLE": "launcher", "HYDRA_HOST_FILE": "/etc/mpi/hostfile"}
    assert _hosts("kubernetes", hydra, {"/etc/mpi/hostfile": "".join(f"{w}:2\n" for w in workers)}) == tuple(
        H(w, 2) for w in workers
    )
    assert schedulers.current({**environ, "K_MPI_JOB_ROLE": "worker"}) is None  # a worker pod starts no ranks


@pytest.mark.parametrize(
    ("name", "environ", "text", "needle"),
    [
        ("pbs", {"PBS_NODEFILE": "f"}, "n1\nbad host\n", "f:2: 'bad host' is not a host name"),
        ("pbs", {"PBS_NODEFILE": "f"}, "\n", "lists no hosts"),
        ("pbs", {"PBS_NODEFILE": ""}, "", "PBS_NODEFILE is unset"),
        ("gridengine", {"PE_HOSTFILE": "f"}, "node12 many all.q UNDEFINED\n", "is not 'HOST SLOTS QUEUE BINDING'"),
        ("gridengine", {"PE_HOSTFILE": "f"}, "node12 0 all.q UNDEFINED\n", "is not 'HOST SLOTS QUEUE BINDING'"),
        ("lsf", {"LSB_JOBID": "7", "LSB_MCPU_HOSTS": "hostA 4 hostB"}, "", "is not 'HOST SLOTS HOST SLOTS"),
        ("kubernetes", {"K_MPI_JOB_ROLE": "launcher", "HYDRA_HOST_FILE": "f"}, "w0:x\n", "is not 'HOST slots=N'"),
    ],
)
def test_a_host_file_that_is_not_one_is_a_clear_error(
    name: str, environ: dict[str, str], text: str, needle: str
) -> None:
    with pytest.raises(UsageError) as caught:
        _hosts(name, environ, {"f": text})
    assert needle in str(caught.value), caught.value


@pytest.mark.parametrize(
    ("name", "printed", "job"),
    [
        ("pbs", "1234.pbs01\n", "1234.pbs01"),
        (
            "pbs",
            "1234[].polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov\n",
            "1234[].polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov",
        ),
        ("gridengine", 'Your job 12 ("train.sh") has been submitted\n', "12"),
        ("gridengine", 'Your job-array 12.1-10:1 ("train.sh") has been submitted\n', "12"),
        ("gridengine", "12\n", "12"),  # qsub -terse
        ("lsf", "Job <779469> is submitted to default queue <batch>.\n", "779469"),
    ],
)
def test_the_job_id_each_submit_command_prints(name: str, printed: str, job: str) -> None:
    assert schedulers.lookup(name).submitted(printed) == job


@pytest.mark.parametrize("name", ["pbs", "gridengine", "lsf"])
def test_a_submit_command_that_printed_no_job_id_is_a_clear_error(name: str) -> None:
    with pytest.raises(UsageError, match="instead of a job id"):
        schedulers.lookup(name).submitted("qsub: Unknown queue\n")


@pytest.mark.parametrize(
    ("environ", "name", "job"),
    [
        ({"PBS_NODEFILE": "f", "PBS_JOBID": "1234.pbs01"}, "pbs", "1234.pbs01"),
        ({"PE_HOSTFILE": "f", "JOB_ID": "12", "SGE_TASK_ID": "undefined"}, "gridengine", "12"),
        ({"LSB_JOBID": "7", "LSB_MCPU_HOSTS": "a 1"}, "lsf", "7"),
    ],
)
def test_inside_a_job_its_scheduler_and_id_are_known(environ: dict[str, str], name: str, job: str) -> None:
    scheduler = schedulers.current(environ)
    assert scheduler is not None and scheduler.name == name and schedulers.job_id(environ) == job


def test_a_job_id_variable_of_another_program_is_no_grid_engine_job() -> None:
    assert schedulers.job_id({"JOB_ID": "12"}) is None and schedulers.current({"JOB_ID": "12"}) is None


# -- hpcdist mpirun inside their jobs -------------------------------------------------------------------------------


def _plan(environ: dict[str, str], **given: Any) -> LaunchPlan:
    """The plan of `hpcdist mpirun [given] -- x` inside a job whose variables are `environ`."""
    options = replace(MpirunOptions(program=("x",), mpirun="mpirun", mpi="openmpi", heartbeat_timeout=0), **given)
    return plan(options, World(environ=environ, python="/venv/bin/python"))


def test_mpirun_inside_a_pbs_job_runs_on_its_hosts_and_says_so(tmp_path: Path) -> None:
    nodefile = tmp_path / "1234.pbs01"
    nodefile.write_text("n1\nn1\nn2\nn2\n")
    environ = {"PBS_NODEFILE": str(nodefile), "PBS_JOBID": "1234.pbs01"}
    launch = _plan(environ, np=4)
    assert (launch.spec.np, launch.spec.hosts) == (4, (H("n1", 2), H("n2", 2)))
    assert launch.note == "hpcdist mpirun: on the hosts of the PBS job 1234.pbs01: n1:2,n2:2"
    assert _plan(environ).spec.np == 4  # no -np: every slot of the job
    held = "/venv/bin/python -m hpcdist.launching.heldterm"  # PBS's SIGTERM to every process: held in the launcher
    assert shlex.join(build_mpirun_argv(launch.spec)[:8]) == f"{held} mpirun -np 4 -H n1:2,n2:2"


def test_mpirun_inside_a_grid_engine_or_lsf_job_runs_on_its_hosts(tmp_path: Path) -> None:
    pe = tmp_path / "pe_hostfile"
    pe.write_text("n1 2 all.q@n1 UNDEFINED\nn2 2 all.q@n2 UNDEFINED\n")
    environ = {"PE_HOSTFILE": str(pe), "JOB_ID": "12", "SGE_TASK_ID": "undefined", "NHOSTS": "2"}
    launch = _plan(environ, np=4)
    assert launch.spec.hosts == (H("n1", 2), H("n2", 2))
    assert launch.note == "hpcdist mpirun: on the hosts of the Grid Engine job 12: n1:2,n2:2"
    assert _plan(environ, exclude="n2").spec.hosts == (H("n1", 2),)  # --exclude picks from the job's hosts
    lsf = _plan({"LSB_JOBID": "7", "LSB_MCPU_HOSTS": "hostA 2 hostB 2"}, np=4)
    assert lsf.spec.hosts == (H("hostA", 2), H("hostB", 2)) and "the LSF job 7" in lsf.note


@pytest.mark.parametrize(
    ("environ", "text", "hint"),
    [
        ({"PBS_NODEFILE": "{}", "PBS_JOBID": "9.pbs"}, "n1\n", "qsub -l select=2:ncpus=64:mpiprocs=4"),
        ({"PE_HOSTFILE": "{}", "JOB_ID": "12", "SGE_TASK_ID": "x"}, "n1 1 all.q UNDEFINED\n", "qsub -pe NAME 8"),
    ],
)
def test_more_ranks_than_the_jobs_slots_say_how_to_ask_the_scheduler_for_more(
    tmp_path: Path, environ: dict[str, str], text: str, hint: str
) -> None:
    (tmp_path / "hosts").write_text(text)
    located = {name: value.format(tmp_path / "hosts") for name, value in environ.items()}
    with pytest.raises(UsageError) as caught:
        _plan(located, np=8)
    said = str(caught.value)
    assert said.startswith("-np 8 is more than the 1 slots of the ") and "(n1:1)" in said and hint in said, said
    assert _plan(located, np=8, oversubscribe=True).spec.np == 8  # asked for: the job's hosts, oversubscribed


def test_a_users_hostfile_wins_over_the_jobs_and_slurms_allocation_is_read_by_mpirun(tmp_path: Path) -> None:
    nodefile, mine = tmp_path / "nodefile", tmp_path / "mine"
    nodefile.write_text("n1\nn2\n")
    mine.write_text("m1 slots=2\n")
    launch = _plan({"PBS_NODEFILE": str(nodefile), "PBS_JOBID": "1"}, hostfile=str(mine))
    assert (launch.spec.hostfile, launch.spec.hosts, launch.note) == (str(mine), (), "")
    slurm = _plan({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}, np=4)
    assert (slurm.spec.hosts, slurm.spec.slurm, slurm.note) == ((), True, "")


def test_mpirun_in_a_pbs_job_whose_node_file_is_gone_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PBS_NODEFILE", "/nonexistent/nodefile")
        status = main(["mpirun", "--dry-run", "--mpirun", "mpirun", "-np", "2", "--", "prog"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("hpcdist: error: cannot read hostfile '/nonexistent/nodefile'"), err


# -- Flux: the hosts of an allocation from its resource set R ------------------------------------------------------

# RFC 20's own example R (flux-framework/rfc, spec_20.rst "Example R", data/spec_20/example1.json): ranks 19-22 are
# node186 to node189, each with 48 cores and 8 GPUs; 32 slots of the allocation in all
RFC20_EXAMPLE = """{
  "version": 1,
  "execution": {
    "R_lite": [{"rank": "19-22", "children": {"core": "0-47", "gpu": "0-7"}}],
    "nodelist": ["node[186-189]"],
    "nslots": 32,
    "starttime": 1676560542,
    "expiration": 1676562342
  }
}"""
# R_lite's entries in no particular order, a bracketed idset, one nodelist entry per host or a hostlist for several
# (RFC 20's R_lite and nodelist, RFC 22's idsets): the hosts follow the ranks' order, not R_lite's
UNEVEN = {
    "version": 1,
    "execution": {
        "R_lite": [
            {"rank": "2-3", "children": {"core": "0-3"}},
            {"rank": "[0-1]", "children": {"core": "0-7", "gpu": "0-1"}},
        ],
        "nodelist": ["big[0-1]", "small0,small1"],
    },
}


def test_flux_s_resource_set_gives_each_host_its_cores_as_slots_in_rank_order() -> None:
    example = tuple(H(f"node{n}", 48) for n in range(186, 190))
    assert resource_hosts(RFC20_EXAMPLE) == example
    assert resource_hosts(RFC20_EXAMPLE, slots=8) == tuple(H(h.host, 8) for h in example)
    assert resource_hosts(json.dumps(UNEVEN)) == (H("big0", 8), H("big1", 8), H("small0", 4), H("small1", 4))


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("flux-resource: ERROR", "is not an RFC 20 resource set of version 1 with R_lite and nodelist"),
        # R before RFC 20 required a nodelist (flux-workflow-examples' job-submit-cli: `flux job info ID R`)
        ('{"version":1,"execution":{"R_lite":[{"rank":"0-1","children":{"core":"0-3"}}]}}', "with R_lite and nodelist"),
        ('{"version":2,"execution":{"R_lite":[],"nodelist":[]}}', "of version 1"),
        ('{"version":1,"execution":{"R_lite":[{"rank":"0-1","children":{"core":"0-3"}}],"nodelist":["n1"]}}',
         "more ranks in R_lite than the 1 hosts of its nodelist"),
        ('{"version":1,"execution":{"R_lite":[{"rank":"0","children":{"core":"0"}}],"nodelist":["n[1-2]"]}}',
         "names 2 hosts in its nodelist for 1 ranks in R_lite"),
        ('{"version":1,"execution":{"R_lite":[{"rank":"0","children":{"core":"3-0"}}],"nodelist":["n1"]}}',
         "lacks a rank or a children.core idset"),
        ('{"version":1,"execution":{"R_lite":[{"rank":"0","children":{"core":"0"}}],"nodelist":["n[1-"]}}',
         "'n[1-' in its nodelist is not a hostlist"),
    ],
)  # fmt: skip
def test_a_resource_set_that_is_not_one_is_a_clear_error(text: str, needle: str) -> None:
    with pytest.raises(UsageError) as caught:
        resource_hosts(text)
    said = str(caught.value)
    assert said.startswith("the resource set flux resource R printed") and needle in said, said
    assert said.endswith("; give --hostfile or -H"), said


def test_a_flux_allocation_is_its_initial_program_not_a_task_of_a_job() -> None:
    """flux-environment(7): a batch script or flux alloc's shell has FLUX_URI, and FLUX_JOB_ID unset; a task of
    `flux run` has both, FLUX_URI then naming the instance that runs it, whose resources are not the task's."""
    scheduler = schedulers.current({"FLUX_URI": "local:///tmp/flux-a1b2/local-0"})
    assert scheduler is not None and scheduler.name == "flux"
    assert schedulers.current(FLUX) is None


def _flux_on_path(folder: Path, printed: str, status: int = 0) -> dict[str, str]:
    """A Flux allocation's variables, with a stand-in `flux` on PATH that prints `printed` when asked
    `flux resource R` (no Flux instance can run here)."""
    flux = folder / "flux"
    flux.write_text(
        f'#!/bin/sh\n[ "$*" = "resource R" ] || exit 64\nprintf %s {shlex.quote(printed)}\n'
        f"[ {status} = 0 ] || echo 'flux-resource: ERROR: the broker cannot be reached' >&2\nexit {status}\n"
    )
    flux.chmod(0o755)
    return {"FLUX_URI": "local:///tmp/flux-a1b2/local-0", "PATH": f"{folder}:/usr/bin:/bin"}


def test_mpirun_in_a_flux_allocation_runs_on_its_hosts_and_says_so(tmp_path: Path) -> None:
    launch = _plan(_flux_on_path(tmp_path, json.dumps(UNEVEN)), np=8)
    assert launch.spec.hosts == (H("big0", 8), H("big1", 8), H("small0", 4), H("small1", 4))
    assert launch.note == (
        "hpcdist mpirun: on the hosts of the Flux allocation (flux resource R): big0:8,big1:8,small0:4,small1:4"
    )
    assert _plan(_flux_on_path(tmp_path, RFC20_EXAMPLE), exclude="node187").spec.np == 3 * 48


@pytest.mark.parametrize(
    ("printed", "status", "needle"),
    [
        ("", 1, "flux resource R failed (flux-resource: ERROR: the broker cannot be reached); run hpcdist mpirun "),
        ("", 0, "the resource set flux resource R printed is not an RFC 20 resource set"),
    ],
)
def test_mpirun_in_a_flux_allocation_whose_resources_cannot_be_read_says_why(
    tmp_path: Path, printed: str, status: int, needle: str
) -> None:
    with pytest.raises(UsageError) as caught:
        _plan(_flux_on_path(tmp_path, printed, status), np=2)
    assert str(caught.value).startswith(needle), caught.value
    with pytest.raises(UsageError, match=r"^flux is not on PATH, so hpcdist cannot run flux resource R; "):
        _plan({"FLUX_URI": "local:///tmp/flux-a1b2/local-0", "PATH": str(tmp_path / "none")}, np=2)


# -- Cray PALS's mpiexec --------------------------------------------------------------------------------------------


def _pals(**given: Any) -> list[str]:
    spec = replace(MpirunSpec(program=("python", "train.py"), np=8, mpirun="mpiexec", family="pals"), **given)
    return families.lookup("pals").command(spec)


def test_pals_mpiexec_gets_ranks_per_node_hosts_binding_and_variables_in_its_own_words() -> None:
    hosts = (H("x1", 4), H("x2", 4))
    assert shlex.join(_pals(hosts=hosts, env=(("A", "1 2"), ("B", None)), bind_to="core")) == (
        "mpiexec -n 8 --hosts x1,x2 --ppn 4 --cpu-bind core --env 'A=1 2' python train.py"
    )
    assert _pals(hostfile="/var/spool/pbs/aux/1") == [
        *["mpiexec", "-n", "8", "--hostfile", "/var/spool/pbs/aux/1", "--cpu-bind", "none", "python", "train.py"]
    ]
    assert families.lookup("pals").hostfile(hosts) == "x1\nx2\n"


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ({"mca": (("btl", "tcp"),)}, "--mca has no Cray PALS mpiexec equivalent"),
        ({"map_by": "node"}, "--map-by node has no Cray PALS mpiexec equivalent"),
        ({"hosts": (H("x1", 4), H("x2", 2))}, "different slots (x1:4, x2:2)"),
        ({"bind_to": "l3cache"}, "--bind-to 'l3cache' has no PALS --cpu-bind"),
    ],
)
def test_what_pals_mpiexec_cannot_say_is_a_clear_error(given: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError) as caught:
        _pals(**given)
    assert needle in str(caught.value), caught.value


def test_pals_lines_on_failed_ranks_are_read_and_left_to_hpcdists_summary() -> None:
    """craycli's cray/pals.py log_rank_exit, as Polaris logs show it."""
    pals = families.lookup("pals")
    killed = "x3006c0s1b0n0.hsn.cm.polaris.alcf.anl.gov: rank 1 died from signal 9 and dumped core"
    assert pals.scanner().scan("stderr", killed + "\n") == [
        RankKilled(1, "x3006c0s1b0n0.hsn.cm.polaris.alcf.anl.gov", 9)
    ]
    exited = "x3006c0s1b0n0.hsn.cm.polaris.alcf.anl.gov: rank 0 exited with code 2"
    assert pals.scanner().scan("stderr", exited) == [] and pals.hides(exited) and pals.hides(killed)
    assert not pals.hides("rank 0 exited with code 2 while training")  # a program's own line is shown
