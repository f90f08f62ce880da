"""Kubernetes manifests for a program: a Kubeflow Trainer TrainJob (torchrun) or an mpi-operator MPIJob (pure).

A manifest is built as a dict and written as JSON, which is YAML too and which `kubectl apply -f` reads as it is:
every string is quoted by the json module, so no value can break the document, and hpcdist needs no YAML library.

- TrainJob (`trainer.kubeflow.org/v1alpha1`): the runtime's torch plug-in gives the trainer container torchrun's
  PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT (kubeflow/trainer
  pkg/runtime/framework/plugins/torch/torch.go), so the container runs `torchrun PROGRAM`: torchrun reads those as
  its defaults and hands the script RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT.
- MPIJob (`kubeflow.org/v2beta1`): the launcher runs `hpcdist mpirun -- PROGRAM`, which reads the host file
  mpi-operator mounts at /etc/mpi/hostfile (schedulers/kubernetes.py); the workers run sshd, as mpi-operator's
  examples do (examples/v2beta1/pi/pi.yaml).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..launching.names import ENV_NAME
from ..program import check_program
from ..records import record
from ..values import check_count
from .torchrun import program_words

__all__ = [
    "CLEAN_POD_POLICIES",
    "MPI_IMPLEMENTATIONS",
    "MPIJobSpec",
    "PodOptions",
    "TrainJobSpec",
    "check_label",
    "check_namespace",
    "check_quantity",
    "manifest_text",
    "mpijob",
    "trainjob",
]

GPU = "nvidia.com/gpu"  # the NVIDIA device plug-in's resource name
# hpcdist's --mpi families -> mpi-operator's spec.mpiImplementation (pkg/apis/kubeflow/v2beta1/types.go)
MPI_IMPLEMENTATIONS = {"openmpi": "OpenMPI", "intel": "Intel", "mpich": "MPICH"}
CLEAN_POD_POLICIES = ("Running", "All", "None")  # runPolicy.cleanPodPolicy (types.go CleanPodPolicy)
# torchrun's variables: the Trainer's torch plug-in sets them and refuses them in spec.trainer.env (constants.go)
_RESERVED = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")  # RFC 1035, as both operators check metadata.name
# a Kubernetes quantity (k8s.io/apimachinery resource.Quantity): a number, then a binary or decimal suffix or exponent
_QUANTITY = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?\Z")
# what YAML's printable set leaves out (besides the C0 controls json escapes): DEL, C1, U+2028/9, non-characters
_NOT_YAML = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")
_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")  # a label key's name and a label value
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")  # RFC 1123 label
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")  # RFC 1123


@record(frozen=True, kw_only=True)
class PodOptions:
    """What both kinds share: the job's name and place, the image, the program, its variables and each pod's share."""

    name: str
    image: str
    program: tuple[str, ...]
    namespace: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cpu: str | None = None  # per pod (node), as a Kubernetes quantity
    memory: str | None = None
    gpus: int | None = None  # nvidia.com/gpu per pod
    suspend: bool = False
    active_deadline_seconds: int | None = None


@record(frozen=True, kw_only=True)
class TrainJobSpec(PodOptions):
    """A TrainJob's own fields: the runtime it names and its nodes."""

    runtime: str = "torch-distributed"
    num_nodes: int = 1
    num_proc_per_node: int | None = None  # None: the runtime's `auto` (GPUs per node, else the CPUs it requests)


@record(frozen=True, kw_only=True)
class MPIJobSpec(PodOptions):
    """An MPIJob's own fields: its workers, the MPI and the run policy."""

    workers: int = 1
    slots_per_worker: int = 1
    mpi: str = "openmpi"
    clean_pod_policy: str = "Running"
    backoff_limit: int | None = None
    ttl_seconds_after_finished: int | None = None
    max_restarts: int = 0  # hpcdist mpirun's own restarts, inside the launcher


def trainjob(spec: TrainJobSpec) -> dict[str, Any]:
    """The TrainJob that runs `torchrun PROGRAM` on spec.num_nodes pods of the runtime spec.runtime."""
    _check_counts(spec, (("--num-nodes", spec.num_nodes, 1), ("--num-proc-per-node", spec.num_proc_per_node, 1)))
    # JobSet names the pods <name>-node-0-<index>-<5 random characters> and refuses a name that makes one too long
    _check_name(spec.name, "--name", f"-node-0-{spec.num_nodes - 1}-xxxxx")
    reserved = sorted(name for name, _ in spec.env if name in _RESERVED)
    if reserved:
        raise UsageError(
            f"--env {reserved[0]}: the Trainer sets torchrun's PET_* variables itself and refuses a TrainJob that "
            "sets them; leave it out and give --num-nodes or --num-proc-per-node instead"
        )
    trainer: dict[str, Any] = {
        "image": _image(spec.image),
        "command": ["torchrun"],
        "args": program_words(spec.program),
        "numNodes": spec.num_nodes,
    }
    if spec.num_proc_per_node is not None:
        trainer["numProcPerNode"] = spec.num_proc_per_node
    if spec.env:
        trainer["env"] = _env(spec.env)
    resources = _resources(spec)
    if resources:
        trainer["resourcesPerNode"] = resources
    body: dict[str, Any] = {"runtimeRef": {"name": _runtime(spec.runtime)}, "trainer": trainer}
    body.update(_run_fields(spec))
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": _metadata(spec),
        "spec": body,
    }


def mpijob(spec: MPIJobSpec) -> dict[str, Any]:
    """The MPIJob whose launcher runs `hpcdist mpirun -- PROGRAM` over spec.workers sshd workers."""
    counts = (
        ("--workers", spec.workers, 1),
        ("--slots-per-worker", spec.slots_per_worker, 1),
        ("--backoff-limit", spec.backoff_limit, 0),
        ("--ttl-seconds-after-finished", spec.ttl_seconds_after_finished, 0),
        ("--max-restarts", spec.max_restarts, 0),
    )
    _check_counts(spec, counts)
    _check_name(spec.name, "--name", f"-worker-{spec.workers - 1}")  # mpi-operator's worker pods (validation.go)
    if spec.mpi not in MPI_IMPLEMENTATIONS:
        raise UsageError(
            f"--mpi {spec.mpi!r}: an MPIJob runs Open MPI, Intel MPI or MPICH (mpi-operator's mpiImplementation); "
            f"choose one of {', '.join(MPI_IMPLEMENTATIONS)}, the MPI of the image"
        )
    if spec.clean_pod_policy not in CLEAN_POD_POLICIES:
        raise UsageError(f"--clean-pod-policy {spec.clean_pod_policy!r}: choose one of {', '.join(CLEAN_POD_POLICIES)}")
    check_program(spec.program, "hpcdist mpirun")
    image = _image(spec.image)
    launch = ["hpcdist", "mpirun", "--mpi", spec.mpi]
    if spec.max_restarts:
        launch += ["--max-restarts", str(spec.max_restarts)]
    for name in dict(spec.env):
        launch += ["-x", name]  # the ranks start through sshd: mpirun carries the launcher's variables to them
    launcher: dict[str, Any] = {"name": "launcher", "image": image, "command": [*launch, "--", *spec.program]}
    if spec.env:
        launcher["env"] = _env(spec.env)
    worker: dict[str, Any] = {"name": "worker", "image": image, "command": ["/usr/sbin/sshd", "-De"]}
    resources = _resources(spec)
    if resources:
        worker["resources"] = resources
    policy: dict[str, Any] = {"cleanPodPolicy": spec.clean_pod_policy}
    for key, value in (
        ("backoffLimit", spec.backoff_limit),
        ("ttlSecondsAfterFinished", spec.ttl_seconds_after_finished),
    ):
        if value is not None:
            policy[key] = value
    policy.update(_run_fields(spec))
    body = {
        "slotsPerWorker": spec.slots_per_worker,
        "mpiImplementation": MPI_IMPLEMENTATIONS[spec.mpi],
        "runPolicy": policy,
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
            "Worker": {"replicas": spec.workers, "template": {"spec": {"containers": [worker]}}},
        },
    }
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": _metadata(spec), "spec": body}


def manifest_text(manifest: dict[str, Any]) -> str:
    """The manifest as JSON, two spaces deep, with a trailing newline, that YAML readers read the same.

    Text stays as it is (UTF-8), but for the characters YAML does not take as they are, which are escaped: control
    characters, line breaks beyond `\\n` (U+0085, U+2028, U+2029) and non-characters. JSON's `\\uD83D\\uDE00`
    surrogate pairs would be two characters to a YAML reader, so characters beyond U+FFFF are never escaped.
    """
    text = json.dumps(manifest, indent=2, ensure_ascii=False)
    return _NOT_YAML.sub(lambda m: f"\\u{ord(m[0]):04x}", text) + "\n"


def check_quantity(text: str, option: str) -> None:
    """Raise UsageError unless `text` is a Kubernetes quantity (`4`, `500m`, `64Gi`, `1.5`)."""
    if not _QUANTITY.match(text):
        raise UsageError(
            f"{option} {text!r} is not a Kubernetes quantity; write a number with an optional suffix, e.g. "
            f"{option} 4 or 500m for CPUs, 64Gi for memory"
        )


def check_label(item: str, option: str = "--label") -> tuple[str, str]:
    """`KEY=VALUE` -> (KEY, VALUE), both as Kubernetes takes a label: `[prefix/]name`, 63 characters each."""
    key, sep, value = item.partition("=")
    prefix, slash, name = key.rpartition("/")
    good = (
        sep
        and 0 < len(name) <= 63
        and _LABEL_NAME.match(name)
        and (not slash or (0 < len(prefix) <= 253 and _SUBDOMAIN.match(prefix)))
        and len(value) <= 63
        and _LABEL_NAME.match(value)
    )
    if not good:
        raise UsageError(
            f"{option} {item!r} is not a Kubernetes label; write KEY=VALUE, e.g. {option} team=vision or {option} "
            "example.com/run=7: names and values of at most 63 letters, digits, '-', '_' and '.', starting and ending "
            "with a letter or digit, with an optional DNS prefix before '/'"
        )
    return key, value


def check_namespace(name: str) -> str:
    """`name` if it can name a namespace (an RFC 1123 label: lower-case letters, digits, '-', at most 63)."""
    if len(name) > 63 or not _NAMESPACE.match(name):
        raise UsageError(
            f"--namespace {name!r} is not a namespace's name; use at most 63 lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, e.g. --namespace team-vision"
        )
    return name


def _check_counts(spec: PodOptions, counts: Sequence[tuple[str, int | None, int]]) -> None:
    """Raise UsageError for a count below its least (or not a whole number); None is a count left out."""
    shared = (("--gpus", spec.gpus, 1), ("--active-deadline-seconds", spec.active_deadline_seconds, 1))
    for option, value, low in (*counts, *shared):
        if value is not None:
            check_count(value, option, low, f"e.g. {option} {max(low, 1)}", 2**31 - 1)  # Kubernetes' int32 fields


def _check_name(name: str, option: str, suffix: str) -> None:
    """Raise UsageError unless `name`, and `name + suffix` (its longest pod's name), are RFC 1035 labels."""
    if not _DNS_LABEL.match(name):
        fixed = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
        fixed = fixed if fixed[:1].isalpha() else f"job-{fixed}".rstrip("-")
        raise UsageError(
            f"{option} {name!r} is not a DNS label, which Kubernetes needs for the job's pods and services: use "
            f"lower-case letters, digits and '-', starting with a letter and ending with a letter or digit, "
            f"e.g. {option} {fixed[:63].rstrip('-')}"
        )
    if len(name + suffix) > 63:
        raise UsageError(
            f"{option} {name!r} is too long (its pods are named up to {name + suffix!r}): a DNS label holds at most "
            f"63 characters; use at most {63 - len(suffix)}"
        )


def _image(image: str) -> str:
    """The image reference, refused when it holds blanks (a typo) or is empty."""
    if not image or any(c.isspace() for c in image):
        raise UsageError(f"--image {image!r} is not an image reference; give one like ghcr.io/org/train:1.0")
    return image


def _runtime(name: str) -> str:
    """The runtime's name, an RFC 1123 subdomain as every Kubernetes object's name."""
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        raise UsageError(
            f"--runtime {name!r} is not the name of a Kubernetes object; give the name `kubectl get "
            "clustertrainingruntimes` lists, e.g. --runtime torch-distributed"
        )
    return name


def _env(env: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """Kubernetes' env list, each name a shell variable name (the launcher passes them on to mpirun)."""
    for name, _ in env:
        if not ENV_NAME.match(name):
            raise UsageError(
                f"--env {name!r}: not a variable name; use letters, digits and '_', not starting with a digit"
            )
    return [{"name": name, "value": value} for name, value in dict(env).items()]  # a later value wins


def _resources(spec: PodOptions) -> dict[str, dict[str, str]]:
    """Each pod's limits (Kubernetes takes the limits as the requests when no request is given)."""
    limits = {}
    for key, value, option in (("cpu", spec.cpu, "--cpu"), ("memory", spec.memory, "--memory")):
        if value is not None:
            check_quantity(value, option)
            limits[key] = value
    if spec.gpus:
        limits[GPU] = str(spec.gpus)
    return {"limits": limits} if limits else {}


def _run_fields(spec: PodOptions) -> dict[str, Any]:
    """suspend and activeDeadlineSeconds, when given (both kinds spell them so)."""
    fields: dict[str, Any] = {}
    if spec.suspend:
        fields["suspend"] = True
    if spec.active_deadline_seconds is not None:
        fields["activeDeadlineSeconds"] = spec.active_deadline_seconds
    return fields


def _metadata(spec: PodOptions) -> dict[str, Any]:
    """metadata: the name, the namespace and the labels given."""
    meta: dict[str, Any] = {"name": spec.name}
    if spec.namespace is not None:
        meta["namespace"] = check_namespace(spec.namespace)
    if spec.labels:
        meta["labels"] = dict(check_label(f"{key}={value}") for key, value in spec.labels)
    return meta
