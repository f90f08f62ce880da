"""`hpcdist trainjob` and `hpcdist mpijob`: exact manifests, checked against the kinds' schemas, and bad input refused.

Every TrainJob is read back through the Kubeflow Trainer's own models (PyPI kubeflow-trainer-api, generated from the
Trainer's OpenAPI schema). No package carries mpi-operator's v2beta1 models: an MPIJob's pod templates are read back
through the same package's core/v1 models, and its own fields are checked against mpi-operator's types.go and
validation.go by `_check_mpijob` below.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from kubeflow_trainer_api.models import IoK8sApiCoreV1PodTemplateSpec, TrainerV1alpha1TrainJob

from hpcdist.cli import main
from hpcdist.errors import UsageError
from hpcdist.jobs.kubernetes import MPIJobSpec, TrainJobSpec, manifest_text, mpijob, trainjob


def _manifest(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """What `hpcdist ARGV` prints, read as YAML (JSON is YAML) and checked to be the same as JSON."""
    assert main(list(argv)) == 0
    out = capsys.readouterr().out
    assert out.endswith("}\n")
    assert yaml.safe_load(out) == json.loads(out)
    return json.loads(out)


def _trainjob_valid(manifest: dict[str, Any]) -> None:
    """The Trainer's models take the manifest and give back all of it: nothing unknown, nothing of a wrong type."""
    model = TrainerV1alpha1TrainJob.from_dict(manifest)
    assert model is not None and model.to_dict() == manifest


# mpi-operator v0.8.0, pkg/apis/kubeflow/v2beta1/types.go (MPIJobSpec, RunPolicy, ReplicaSpec) and
# pkg/apis/kubeflow/validation/validation.go: each field hpcdist writes, and what it must be.
_MPIJOB_SPEC = {
    "slotsPerWorker": lambda v: type(v) is int and v >= 0,
    "mpiImplementation": lambda v: v in ("OpenMPI", "Intel", "MPICH"),
    "runPolicy": dict,
    "mpiReplicaSpecs": dict,
}
_RUN_POLICY = {
    "cleanPodPolicy": lambda v: v in ("None", "Running", "All"),
    "ttlSecondsAfterFinished": lambda v: type(v) is int and 0 <= v < 2**31,
    "activeDeadlineSeconds": lambda v: type(v) is int and v >= 0,
    "backoffLimit": lambda v: type(v) is int and 0 <= v < 2**31,
    "suspend": lambda v: type(v) is bool,
}


def _fields(value: dict[str, Any], table: dict[str, Any], where: str) -> None:
    """Each key of `value` is in `table` and its value passes the table's check."""
    for key, item in value.items():
        assert key in table, f"{where}.{key} is not a field of mpi-operator's v2beta1 MPIJob"
        check = table[key]
        assert isinstance(item, check) if isinstance(check, type) else check(item), f"{where}.{key}: {item!r}"


def _check_mpijob(manifest: dict[str, Any]) -> None:
    """The MPIJob as mpi-operator's v2beta1 types and validation take it (see the tables above)."""
    assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    spec = manifest["spec"]
    _fields(spec, _MPIJOB_SPEC, "spec")
    _fields(spec["runPolicy"], _RUN_POLICY, "spec.runPolicy")
    assert "cleanPodPolicy" in spec["runPolicy"]  # validateRunPolicy: required
    replicas = spec["mpiReplicaSpecs"]
    assert set(replicas) == {"Launcher", "Worker"}
    for role, replica in replicas.items():
        assert set(replica) <= {"replicas", "template", "restartPolicy"}, role
        assert type(replica["replicas"]) is int and replica["replicas"] >= 1, role
        template = IoK8sApiCoreV1PodTemplateSpec.from_dict(replica["template"])
        assert template is not None and template.to_dict() == replica["template"], role
        assert replica["template"]["spec"]["containers"], role  # validateReplicaSpec: at least one container
    assert replicas["Launcher"]["replicas"] == 1  # validateLauncherReplicaSpec
    # validateMPIJobName: the last worker's host name is a DNS-1035 label
    last = f"{manifest['metadata']['name']}-worker-{replicas['Worker']['replicas'] - 1}"
    assert len(last) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", last)


def test_a_trainjob_runs_torchrun_with_the_options_as_its_fields(capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(
        capsys, "trainjob", "--name", "mnist-ddp", "--image", "ghcr.io/example/train:1.0", "--num-nodes", "2",
        "--num-proc-per-node", "4", "--gpus", "4", "--cpu", "16", "--memory", "64Gi", "--namespace", "vision",
        "--label", "team=vision", "--env", "NCCL_DEBUG=INFO", "--suspend", "--active-deadline-seconds", "3600",
        "--", "python", "train.py", "--epochs", "1",
    )  # fmt: skip
    assert manifest == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "mnist-ddp", "namespace": "vision", "labels": {"team": "vision"}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "image": "ghcr.io/example/train:1.0",
                "command": ["torchrun"],
                "args": ["train.py", "--epochs", "1"],
                "numNodes": 2,
                "numProcPerNode": 4,
                "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                "resourcesPerNode": {"limits": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}},
            },
            "suspend": True,
            "activeDeadlineSeconds": 3600,
        },
    }
    _trainjob_valid(manifest)


def test_a_plain_trainjob_leaves_the_runtime_its_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """numProcPerNode auto is left out (the runtime's default), so the manifest suits Trainer 2.0 to 2.3 alike."""
    manifest = _manifest(capsys, "trainjob", "--name", "a", "--image", "img", "--", "python", "-m", "pkg.train", "x")
    assert manifest["spec"] == {
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"image": "img", "command": ["torchrun"], "args": ["-m", "pkg.train", "x"], "numNodes": 1},
    }
    _trainjob_valid(manifest)


def test_a_trainjob_of_a_binary_runs_it_through_torchrun_no_python(capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(capsys, "trainjob", "--name", "a", "--image", "img", "--runtime", "my-torch", "--", "./bench")
    assert manifest["spec"]["runtimeRef"] == {"name": "my-torch"}
    assert manifest["spec"]["trainer"]["args"] == ["--no_python", "./bench"]
    _trainjob_valid(manifest)


def test_an_mpijob_launches_hpcdist_mpirun_over_sshd_workers(capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(
        capsys, "mpijob", "--name", "pi", "--image", "ghcr.io/example/mpi:1.0", "--workers", "2",
        "--slots-per-worker", "4", "--mpi", "mpich", "--cpu", "8", "--gpus", "4", "--env", "NCCL_DEBUG=INFO",
        "--max-restarts", "2", "--backoff-limit", "0", "--ttl-seconds-after-finished", "600", "--clean-pod-policy",
        "All", "--label", "example.com/run=7", "--", "python", "train.py", "--epochs", "1",
    )  # fmt: skip
    image = "ghcr.io/example/mpi:1.0"
    launch = ["hpcdist", "mpirun", "--mpi", "mpich", "--max-restarts", "2", "-x", "NCCL_DEBUG", "--"]
    launcher = {
        "name": "launcher",
        "image": image,
        "command": [*launch, "python", "train.py", "--epochs", "1"],
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
    }
    worker = {
        "name": "worker",
        "image": image,
        "command": ["/usr/sbin/sshd", "-De"],
        "resources": {"limits": {"cpu": "8", "nvidia.com/gpu": "4"}},
    }
    assert manifest == {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi", "labels": {"example.com/run": "7"}},
        "spec": {
            "slotsPerWorker": 4,
            "mpiImplementation": "MPICH",
            "runPolicy": {"cleanPodPolicy": "All", "backoffLimit": 0, "ttlSecondsAfterFinished": 600},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [worker]}}},
            },
        },
    }
    _check_mpijob(manifest)


def test_a_plain_mpijob_is_open_mpi_with_one_worker(capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(capsys, "mpijob", "--name", "a", "--image", "img", "--suspend", "--", "./pi")
    assert manifest["spec"]["mpiImplementation"] == "OpenMPI"
    assert manifest["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "suspend": True}
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"] == ["hpcdist", "mpirun", "--mpi", "openmpi", "--", "./pi"]
    _check_mpijob(manifest)


HOSTILE = ["a 0", 'a"=0"', "a'; echo foo", "a\n0", "key: value # not a comment", "- [x]", "ünï 😀", "\\u0000"]
HOSTILE += ["a\x85b\u2028c\x7f\ufeff\x1b"]  # characters YAML does not take as they are


@pytest.mark.parametrize("value", HOSTILE)
def test_any_value_comes_back_as_given(value: str) -> None:
    """Values are JSON strings: read as YAML or JSON, each is exactly what was given, and the schema takes it."""
    env = (("TAG", value),)
    manifest = trainjob(TrainJobSpec(name="a", image="img", program=("train.py", value), env=env))
    text = manifest_text(manifest)
    for read in (yaml.safe_load(text), json.loads(text)):
        assert read["spec"]["trainer"]["args"] == ["train.py", value]
        assert read["spec"]["trainer"]["env"] == [{"name": "TAG", "value": value}]
    _trainjob_valid(manifest)
    mpi = mpijob(MPIJobSpec(name="a", image="img", program=("./pi", value), env=env))
    _check_mpijob(yaml.safe_load(manifest_text(mpi)))


def test_a_later_env_value_wins_and_is_listed_once() -> None:
    spec = MPIJobSpec(name="a", image="img", program=("./pi",), env=(("A", "1"), ("B", "2"), ("A", "3")))
    launcher = mpijob(spec)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["env"] == [{"name": "A", "value": "3"}, {"name": "B", "value": "2"}]
    assert launcher["command"] == ["hpcdist", "mpirun", "--mpi", "openmpi", "-x", "A", "-x", "B", "--", "./pi"]


@pytest.mark.parametrize(
    ("change", "what"),
    [
        (lambda m: m["spec"]["trainer"].update(numNode=2), "a misspelt field"),
        (lambda m: m["spec"]["trainer"].update(numProcPerNode="auto"), "Trainer 2.2's int numProcPerNode as 'auto'"),
        (lambda m: m["spec"]["trainer"].update(numNodes="2"), "a count as text"),
        (lambda m: m["spec"].update(runtimeRef={"name": "torch-distributed", "kind": 1}), "a kind as a number"),
        (lambda m: m["spec"]["trainer"]["env"][0].update(valu="x"), "a misspelt env field"),
    ],
)
def test_the_trainjob_check_bites(change: Any, what: str) -> None:
    manifest = trainjob(TrainJobSpec(name="a", image="img", program=("train.py",), env=(("A", "1"),)))
    _trainjob_valid(manifest)
    change(manifest)
    with pytest.raises(Exception) as caught:  # pydantic's ValidationError, or the round trip's AssertionError
        _trainjob_valid(manifest)
    assert type(caught.value).__name__ in ("ValidationError", "AssertionError"), what


@pytest.mark.parametrize(
    ("change", "what"),
    [
        (lambda s: s.update(slotPerWorker=1), "a misspelt spec field"),
        (lambda s: s.update(mpiImplementation="OpenMpi"), "an implementation mpi-operator does not know"),
        (lambda s: s["runPolicy"].update(cleanPodPolicy="Always"), "a clean pod policy it does not know"),
        (lambda s: s["runPolicy"].update(backoffLimit="1"), "a count as text"),
        (lambda s: s["mpiReplicaSpecs"]["Launcher"].update(replicas=2), "two launchers"),
        (lambda s: s["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(comand=[]), "a typo"),
        (lambda s: s["mpiReplicaSpecs"]["Worker"]["template"]["spec"].update(containers=[{"name": 1}]), "a bad name"),
    ],
)
def test_the_mpijob_check_bites(change: Any, what: str) -> None:
    manifest = mpijob(MPIJobSpec(name="a", image="img", program=("./pi",)))
    _check_mpijob(manifest)
    change(manifest["spec"])
    with pytest.raises(Exception) as caught:
        _check_mpijob(manifest)
    assert type(caught.value).__name__ in ("ValidationError", "AssertionError"), what


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["trainjob", "--name", "MNIST_run", "--image", "i", "--", "t.py"],
            "--name 'MNIST_run' is not a DNS label, which Kubernetes needs for the job's pods and services: use "
            "lower-case letters, digits and '-', starting with a letter and ending with a letter or digit, e.g. "
            "--name mnist-run",
        ),
        (["trainjob", "--name", "7b", "--image", "i", "--", "t.py"], "e.g. --name job-7b"),
        (
            ["trainjob", "--name", "a" * 48, "--num-nodes", "16", "--image", "i", "--", "t.py"],
            f"--name {'a' * 48!r} is too long (its pods are named up to {'a' * 48 + '-node-0-15-xxxxx'!r}): a DNS "
            "label holds at most 63 characters; use at most 47",
        ),
        (
            ["mpijob", "--name", "a" * 55, "--workers", "10", "--image", "i", "--", "./pi"],
            f"--name {'a' * 55!r} is too long (its pods are named up to {'a' * 55 + '-worker-9'!r}): a DNS label holds "
            "at most 63 characters; use at most 54",
        ),
        (
            ["trainjob", "--name", "a", "--image", "i", "--env", "PET_NNODES=2", "--", "t.py"],
            "--env PET_NNODES: the Trainer sets torchrun's PET_* variables itself and refuses a TrainJob that sets "
            "them; leave it out and give --num-nodes or --num-proc-per-node instead",
        ),
        (
            ["trainjob", "--name", "a", "--image", "i", "--memory", "64GB", "--", "t.py"],
            "--memory '64GB' is not a Kubernetes quantity; write a number with an optional suffix, e.g. --memory 4 "
            "or 500m for CPUs, 64Gi for memory",
        ),
        (["trainjob", "--name", "a", "--image", "i", "--label", "team", "--", "t.py"], "--label 'team' is not a"),
        (["trainjob", "--name", "a", "--image", "i", "--label", "a=b c", "--", "t.py"], "--label 'a=b c' is not a"),
        (["trainjob", "--name", "a", "--image", "i", "--namespace", "Team", "--", "t.py"], "--namespace 'Team' is"),
        (["trainjob", "--name", "a", "--image", "i", "--runtime", "Torch", "--", "t.py"], "--runtime 'Torch' is not"),
        (["trainjob", "--name", "a", "--image", "i a", "--", "t.py"], "--image 'i a' is not an image reference"),
        (["trainjob", "--name", "a", "--image", "i", "--num-nodes", "0", "--", "t.py"], "--num-nodes must be at"),
        (
            ["trainjob", "--name", "a", "--image", "i", "--num-proc-per-node", "gpu", "--", "t.py"],
            "--num-proc-per-node 'gpu' is not a whole number; write it in ASCII digits 0-9 alone (no sign, blank or "
            "'_'), e.g. --num-proc-per-node 1, or one of auto",
        ),
        (["trainjob", "--name", "a", "--image", "i"], "no program given; usage: hpcdist trainjob --name NAME"),
        (["trainjob", "--image", "i", "--", "t.py"], "the following arguments are required: --name"),
        (["trainjob", "--name", "a", "--image", "i", "--env", "1X=2", "--", "t.py"], "1X=2"),
        (
            ["mpijob", "--name", "a", "--image", "i", "--mpi", "pals", "--", "./pi"],
            "argument --mpi: unknown value 'pals'; choose one of openmpi, intel, mpich",
        ),
        (
            ["mpijob", "--name", "a", "--image", "i", "--clean-pod-policy", "running", "--", "./pi"],
            "argument --clean-pod-policy: unknown value 'running'; did you mean Running? choose one of Running, All",
        ),
        (["mpijob", "--name", "a", "--image", "i", "--", "-x"], "the program '-x' starts with '-', so hpcdist mpirun"),
        (["mpijob", "--name", "a", "--image", "i", "--num-nodes", "2", "--", "./pi"], "unknown option --num-nodes"),
    ],
)
def test_bad_input_is_a_clear_error(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcdist: error: ") and message in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (TrainJobSpec(name="a", image="i", program=("t.py",), num_nodes=0), "--num-nodes must be at least 1, got 0"),
        (TrainJobSpec(name="a", image="i", program=("t.py",), gpus=0), "--gpus must be at least 1, got 0"),
        (MPIJobSpec(name="a", image="i", program=("./pi",), workers=0), "--workers must be at least 1, got 0"),
        (MPIJobSpec(name="a", image="i", program=("./pi",), backoff_limit=-1), "--backoff-limit must be at least 0"),
        (MPIJobSpec(name="a", image="i", program=("./pi",), slots_per_worker=2**31), "must be at most 2147483647"),
    ],
)
def test_the_builders_check_their_counts(spec: TrainJobSpec | MPIJobSpec, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        trainjob(spec) if isinstance(spec, TrainJobSpec) else mpijob(spec)


def test_write_puts_the_manifest_in_a_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.json"
    assert main(["mpijob", "--name", "a", "--image", "img", "--write", str(path), "--", "./pi"]) == 0
    assert capsys.readouterr().out == ""
    assert path.read_text() == manifest_text(mpijob(MPIJobSpec(name="a", image="img", program=("./pi",))))
