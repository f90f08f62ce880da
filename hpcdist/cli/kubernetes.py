"""`hpcdist trainjob` and `hpcdist mpijob`: argparse -> spec -> a Kubernetes manifest (JSON, which is YAML too).

Two commands rather than one with a --kind: each kind has options of its own (a runtime and processes per node; an
MPI, slots per worker and a run policy), spelt as the kind's own fields, and each gets a --help of its own.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import UsageError
from .generate import emit
from .types import Later, Whole, WholeOrWord, count

__all__ = ["COMMANDS", "add_parsers"]

_CHECKS = "..jobs.kubernetes"


def add_parsers(sub: Any) -> None:
    """Add `trainjob` and `mpijob` to the CLI's subparsers."""
    from ..jobs.kubernetes import CLEAN_POD_POLICIES, MPI_IMPLEMENTATIONS

    tj = sub.add_parser(
        "trainjob",
        help="write a Kubeflow Trainer TrainJob (torchrun in each pod) as JSON, which kubectl reads as YAML",
        description="A TrainJob (trainer.kubeflow.org/v1alpha1) whose pods run `torchrun PROGRAM`: the Trainer's "
        "torch runtime gives torchrun the nodes, this node's rank and the rendezvous (PET_* variables). Everything "
        "after `--` is the program, e.g. -- python train.py --epochs 1.",
    )
    _common(tj)
    t = tj.add_argument_group("trainer (spec.trainer)")
    t.add_argument("--runtime", default="torch-distributed", help="spec.runtimeRef.name (default: torch-distributed)")
    t.add_argument("--num-nodes", type=count, default=1, metavar="N", help="numNodes: pods (default: 1)")
    t.add_argument(
        "--num-proc-per-node",
        type=WholeOrWord(1, ("auto",)),
        default="auto",
        metavar="N|auto",
        help="numProcPerNode: processes per pod (default: auto, the runtime's: one per GPU, else per CPU of --cpu)",
    )
    _resources(tj)
    _finish(tj)

    mj = sub.add_parser(
        "mpijob",
        help="write an mpi-operator MPIJob (hpcdist mpirun in the launcher) as JSON, which kubectl reads as YAML",
        description="An MPIJob (kubeflow.org/v2beta1) whose launcher runs `hpcdist mpirun -- PROGRAM` over worker "
        "pods that run sshd; hpcdist mpirun reads the workers from the host file mpi-operator mounts. The image "
        "needs hpcdist, the MPI of --mpi and sshd. Everything after `--` is the program each rank runs.",
    )
    _common(mj)
    m = mj.add_argument_group("MPI (spec)")
    m.add_argument("--workers", type=count, default=1, metavar="N", help="mpiReplicaSpecs.Worker.replicas (default: 1)")
    m.add_argument(
        "--slots-per-worker", type=count, default=1, metavar="N", help="slotsPerWorker: ranks per worker (default: 1)"
    )
    m.add_argument(
        "--mpi",
        choices=tuple(MPI_IMPLEMENTATIONS),
        default="openmpi",
        help="the image's MPI: mpiImplementation OpenMPI, Intel or MPICH (default: openmpi)",
    )
    m.add_argument(
        "--max-restarts",
        type=Whole(0),
        default=0,
        metavar="N",
        help="hpcdist mpirun --max-restarts in the launcher: run the job again after a failure (default: 0)",
    )
    _resources(mj, "each worker pod's")
    r = mj.add_argument_group("run policy (spec.runPolicy)")
    r.add_argument(
        "--clean-pod-policy",
        choices=CLEAN_POD_POLICIES,
        default="Running",
        help="cleanPodPolicy: the pods deleted when the job ends (default: Running)",
    )
    r.add_argument("--backoff-limit", type=Whole(0), metavar="N", help="backoffLimit: retries of the launcher pod")
    r.add_argument("--ttl-seconds-after-finished", type=Whole(0), metavar="SECONDS", help="ttlSecondsAfterFinished")
    _finish(mj)


def _common(p: argparse.ArgumentParser) -> None:
    """The job's name, place and image."""
    j = p.add_argument_group("job (metadata)")
    j.add_argument("--name", required=True, help="metadata.name: a DNS label, e.g. mnist-ddp")
    j.add_argument("--namespace", help="metadata.namespace (default: kubectl's)")
    j.add_argument(
        "--label",
        action="append",
        default=[],
        type=Later(_CHECKS, "check_label", by_field=False),
        metavar="KEY=VALUE",
        help="metadata.labels (repeatable)",
    )
    j.add_argument("--image", required=True, help="the container image, with torch, and hpcdist for an MPIJob")


def _resources(p: argparse.ArgumentParser, whose: str = "each pod's") -> None:
    """--cpu, --memory and --gpus: a pod's limits."""
    g = p.add_argument_group(f"resources ({whose} limits)")
    quantity = Later(_CHECKS, "check_quantity", by_field=False)
    g.add_argument("--cpu", type=quantity, metavar="QUANTITY", help="cpu, e.g. 8 or 500m")
    g.add_argument("--memory", type=quantity, metavar="QUANTITY", help="memory, e.g. 64Gi")
    g.add_argument("--gpus", type=count, metavar="N", help="nvidia.com/gpu")


def _finish(p: argparse.ArgumentParser) -> None:
    """The environment, suspend, the deadline, --write and the program."""
    g = p.add_argument_group("run")
    g.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="a variable (repeatable)")
    g.add_argument(
        "--env-file",
        action="append",
        default=[],
        metavar="FILE",
        help="[export] NAME=VALUE lines read with POSIX sh quoting, without expansion (repeatable; --env wins)",
    )
    g.add_argument("--suspend", action="store_true", help="suspend: created, but no pod starts until resumed")
    g.add_argument(
        "--active-deadline-seconds", type=Whole(1), metavar="SECONDS", help="activeDeadlineSeconds: the most run time"
    )
    g.add_argument("--write", metavar="FILE", help="write the manifest to FILE instead of printing it")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")


def _pods(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The options both kinds share, as PodOptions' fields."""
    from ..jobs.kubernetes import check_label
    from ..jobs.profiles import job_environment, parse_env_item, read_env_file

    env = job_environment(
        None, [read_env_file(path) for path in args.env_file], {}, [parse_env_item(item) for item in args.env]
    )
    return {
        "name": args.name,
        "image": args.image,
        "program": _program(args.program, command),
        "namespace": args.namespace,
        "labels": tuple(check_label(item) for item in args.label),
        "env": tuple(env.items()),
        "cpu": args.cpu,
        "memory": args.memory,
        "gpus": args.gpus,
        "suspend": args.suspend,
        "active_deadline_seconds": args.active_deadline_seconds,
    }


def _program(words: Sequence[str], command: str) -> tuple[str, ...]:
    """The words after `--`; UsageError if there are none."""
    program = tuple(words[1:] if words[:1] == ["--"] else words)
    if not program:
        raise UsageError(f"no program given; usage: hpcdist {command} --name NAME --image IMAGE -- PROGRAM [ARGS...]")
    return program


def _trainjob(args: argparse.Namespace) -> int:
    """`hpcdist trainjob`: print the TrainJob or write it (--write)."""
    from ..jobs.kubernetes import TrainJobSpec, manifest_text, trainjob

    spec = TrainJobSpec(
        **_pods(args, "trainjob"),
        runtime=args.runtime,
        num_nodes=args.num_nodes,
        num_proc_per_node=None if args.num_proc_per_node == "auto" else int(args.num_proc_per_node),
    )
    emit(manifest_text(trainjob(spec)), args.write)
    return 0


def _mpijob(args: argparse.Namespace) -> int:
    """`hpcdist mpijob`: print the MPIJob or write it (--write)."""
    from ..jobs.kubernetes import MPIJobSpec, manifest_text, mpijob

    spec = MPIJobSpec(
        **_pods(args, "mpijob"),
        workers=args.workers,
        slots_per_worker=args.slots_per_worker,
        mpi=args.mpi,
        clean_pod_policy=args.clean_pod_policy,
        backoff_limit=args.backoff_limit,
        ttl_seconds_after_finished=args.ttl_seconds_after_finished,
        max_restarts=args.max_restarts,
    )
    emit(manifest_text(mpijob(spec)), args.write)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"trainjob": _trainjob, "mpijob": _mpijob}
