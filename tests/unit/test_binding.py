"""`--bind auto`'s planner and its topology readers, on fixture machines (tests/unit/data/topology, see generate.py)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from hpcdist.errors import UsageError
from hpcdist.placement.binding import binding_env, check_bind, plan_binding
from hpcdist.placement.topology import Device, Topology, load_topology, parse_cpulist, parse_hwloc_xml, read_sysfs
from hpcdist.records import replace

DATA = Path(__file__).parent / "data" / "topology"
MACHINES = ("dgx", "1s4gpu", "odd7", "2s3c")


def sysfs_tree(name: str, root: Path) -> Path:
    """Write the fixture's sysfs listing as a real tree of files and symbolic links under `root`."""
    for line in (DATA / f"{name}.sysfs").read_text().splitlines():
        path, _, text = line.partition("\t")
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if text.startswith("-> "):
            target.symlink_to(text[3:])
        else:
            target.write_text(text + "\n")
    return root


def from_sysfs(name: str, tmp_path: Path) -> Topology:
    return read_sysfs(str(sysfs_tree(name, tmp_path)))


def from_xml(name: str) -> Topology:
    return parse_hwloc_xml((DATA / f"{name}.xml").read_text(), name)


@pytest.fixture(params=["sysfs", "xml"])
def read(request: pytest.FixtureRequest, tmp_path: Path):
    """Each test runs on both readers' view of the machine."""
    return (lambda name: from_sysfs(name, tmp_path)) if request.param == "sysfs" else from_xml


def device_name(device: Device | None) -> str | None:
    """A planned GPU's or NIC's name (None: the plan has none)."""
    return None if device is None else device.name


def check_plan(plan, topology: Topology, ranks: int) -> None:
    """Disjoint shares of whole cores (every SMT sibling with its core), one per local rank, OMP = cores."""
    assert [b.local_rank for b in plan] == list(range(ranks))
    seen: set[int] = set()
    cores = {core for node in topology.nodes for core in node.cores}
    for b in plan:
        assert b.cpus and not seen & set(b.cpus)
        seen |= set(b.cpus)
        mine = [core for core in cores if set(core) & set(b.cpus)]
        assert all(set(core) <= set(b.cpus) for core in mine)  # whole cores
        assert len(mine) == b.cores
        assert binding_env(b, {})["OMP_NUM_THREADS"] == str(b.cores)


@pytest.mark.parametrize("name", MACHINES)
def test_both_readers_see_the_same_machine(name: str, tmp_path: Path) -> None:
    sysfs, xml = from_sysfs(name, tmp_path), from_xml(name)
    assert sysfs.nodes == xml.nodes
    assert [(g.name, g.numa) for g in sysfs.gpus] == [(g.name, g.numa) for g in xml.gpus]
    assert [(n.name, n.numa, n.rdma) for n in sysfs.nics] == [(n.name, n.numa, n.rdma) for n in xml.nics]


def test_dgx_topology(read) -> None:
    t = read("dgx")
    assert [(n.id, n.package, len(n.cores)) for n in t.nodes] == [(0, 0, 56), (1, 1, 56)]
    assert t.nodes[0].cores[0] == (0, 112) and t.nodes[1].cores[0] == (56, 168)  # Intel's SMT numbering
    assert [g.numa for g in t.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g.name for g in t.gpus] == sorted(g.name for g in t.gpus)
    assert sorted(n.name for n in t.nics if n.rdma) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert t.describe().startswith("2 NUMA nodes, 112 cores (224 CPUs), 8 GPUs")


def test_dgx_eight_ranks_get_their_gpus_numa_cores_and_nearest_nic(read) -> None:
    t = read("dgx")
    plan = plan_binding(t, 8)
    check_plan(plan, t, 8)
    node_cpus = {n.id: {c for core in n.cores for c in core} for n in t.nodes}
    for b in plan:
        assert b.gpu == t.gpus[b.local_rank]
        assert b.gpu is not None  # t.gpus holds Devices
        assert b.numa == (b.gpu.numa,) and set(b.cpus) <= node_cpus[b.gpu.numa]
        assert b.cores == 14  # 56 cores of a NUMA node, 4 ranks on it
    assert plan[0].cpus == (*range(0, 14), *range(112, 126))
    # mlx5_1 sits behind the PCIe switch of GPUs 0 and 1, mlx5_0 behind that of GPUs 2 and 3
    assert [device_name(b.nic) for b in plan] == ["mlx5_1"] * 2 + ["mlx5_0"] * 2 + ["mlx5_2"] * 2 + ["mlx5_3"] * 2
    assert binding_env(plan[2], {}) == {"OMP_NUM_THREADS": "14", "NCCL_IB_HCA": "=mlx5_0"}


def test_dgx_uneven_and_oversubscribed_gpus(read) -> None:
    t = read("dgx")
    three = plan_binding(t, 3)  # GPUs 0-2 all on NUMA 0: 56 cores in 19, 19, 18
    check_plan(three, t, 3)
    assert [b.cores for b in three] == [19, 19, 18] and all(b.numa == (0,) for b in three)
    sixteen = plan_binding(t, 16)  # two ranks per GPU
    check_plan(sixteen, t, 16)
    assert sixteen[8].gpu == t.gpus[0] and all(b.cores == 7 for b in sixteen)


def test_cuda_visible_devices_picks_the_gpus(read) -> None:
    t = read("dgx")
    plan = plan_binding(t, 2, {"CUDA_VISIBLE_DEVICES": "4,7"})
    assert [device_name(b.gpu) for b in plan] == [t.gpus[4].name, t.gpus[7].name]
    assert all(b.numa == (1,) and b.cores == 28 for b in plan)
    assert [device_name(b.nic) for b in plan] == ["mlx5_2", "mlx5_3"]
    uuids = plan_binding(t, 2, {"CUDA_VISIBLE_DEVICES": "GPU-8d6a1c2e"})  # cannot be mapped: a CPU split
    assert [b.gpu for b in uuids] == [None, None] and [b.numa for b in uuids] == [(0,), (1,)]


def test_one_socket_four_gpus_plain_nic(read) -> None:
    t = read("1s4gpu")
    assert [n.name for n in t.nics] == ["enp129s0"]  # lo and docker0 are virtual, enp130s0 is down
    plan = plan_binding(t, 4)
    check_plan(plan, t, 4)
    assert [b.cores for b in plan] == [8] * 4 and len(plan[0].cpus) == 16
    assert plan[0].cpus == (*range(0, 8), *range(32, 40))
    assert {device_name(b.nic) for b in plan} == {"enp129s0"}
    assert binding_env(plan[3], {"OMP_NUM_THREADS": "2"}) == {"NCCL_SOCKET_IFNAME": "=enp129s0"}  # the user's OMP


@pytest.mark.parametrize(("ranks", "sizes"), [(1, [7]), (2, [4, 3]), (3, [3, 2, 2]), (7, [1] * 7)])
def test_odd_core_count_no_smt(read, ranks: int, sizes: list[int]) -> None:
    t = read("odd7")
    plan = plan_binding(t, ranks)
    check_plan(plan, t, ranks)
    assert [b.cores for b in plan] == sizes and [len(b.cpus) for b in plan] == sizes
    assert sorted(c for b in plan for c in b.cpus) == list(range(7))  # every core used
    assert all(b.gpu is None and b.nic is None for b in plan)


def test_six_cores_three_ranks_two_sockets_adjacent_smt(read) -> None:
    t = read("2s3c")
    plan = plan_binding(t, 3)
    check_plan(plan, t, 3)
    assert [b.cpus for b in plan] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)]
    assert [b.numa for b in plan] == [(0,), (0, 1), (1,)]  # the middle share must cross the sockets
    two = plan_binding(t, 2)
    assert [b.numa for b in two] == [(0,), (1,)] and [b.cores for b in two] == [3, 3]


def test_more_ranks_than_cores_is_a_clear_error(read) -> None:
    with pytest.raises(UsageError, match=r"8 ranks need a core each, but this node has 7 cores.*--bind none"):
        plan_binding(read("odd7"), 8)


def test_restrict_to_allowed_cpus(read) -> None:
    t = read("2s3c").restrict({0, 2, 3, 6, 7})  # a cgroup that holds half of a core: the core stays, as one CPU
    assert [n.cores for n in t.nodes] == [((0,), (2, 3)), ((6, 7),)]
    plan = plan_binding(t, 3)
    assert [b.cpus for b in plan] == [(0,), (2, 3), (6, 7)]
    with pytest.raises(UsageError, match="4 ranks"):
        plan_binding(t, 4)


def test_gpu_numa_without_allowed_cpus_falls_back_to_the_node_split(read) -> None:
    t = read("dgx").restrict(range(56, 112))  # only socket 1's cores, but GPUs on both sockets
    plan = plan_binding(t, 8)
    assert all(b.gpu is None and b.numa == (1,) and b.cores == 7 for b in plan)


def test_cpulist_and_bind_option() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert check_bind("auto", "none") == "auto"
    with pytest.raises(UsageError, match="--bind auto and --bind-to core both bind"):
        check_bind("auto", "core")
    with pytest.raises(UsageError, match="--bind 'numa': use one of none, auto"):
        check_bind("numa", "none")


def test_load_topology_from_hpcdist_topology(tmp_path: Path) -> None:
    t = load_topology({"HPCDIST_TOPOLOGY": str(DATA / "dgx.xml")}, allowed=range(4))
    assert [n.cores for n in t.nodes] == [((0,), (1,), (2,), (3,))]
    with pytest.raises(UsageError, match=r"HPCDIST_TOPOLOGY .* cannot be read.*lstopo --of xml"):
        load_topology({"HPCDIST_TOPOLOGY": str(tmp_path / "missing.xml")})
    (tmp_path / "bad.xml").write_text("<topology/>")
    with pytest.raises(UsageError, match="no hwloc topology with a NUMANode"):
        load_topology({"HPCDIST_TOPOLOGY": str(tmp_path / "bad.xml")})
    with pytest.raises(UsageError, match="no usable CPU"):
        load_topology({"HPCDIST_TOPOLOGY": str(DATA / "odd7.xml")}, allowed={99})


def test_this_machine() -> None:
    t = read_sysfs()
    allowed = os.sched_getaffinity(0)
    plan = plan_binding(t.restrict(allowed), len(allowed))
    given = sorted(c for b in plan for c in b.cpus)
    assert len(given) == len(set(given)) and set(given) <= allowed  # shares of this process's CPUs, disjoint
    if not t.gpus:  # one rank per allowed CPU and no GPU to plan around: every CPU is given out
        assert given == sorted(allowed)


def test_mpirun_bind_auto_reaches_the_shim_as_a_variable(capsys: pytest.CaptureFixture[str]) -> None:
    from hpcdist.cli import main

    assert main(["mpirun", "-np", "2", "--bind", "auto", "--dry-run", "--", "python", "x.py"]) == 0
    assert "-x HPCDIST_BIND=auto" in capsys.readouterr().out
    assert main(["mpirun", "-np", "2", "--dry-run", "--", "python", "x.py"]) == 0
    assert "HPCDIST_BIND" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--bind", "auto", "--bind-to", "core"], "--bind auto and --bind-to core both bind the ranks"),
        (["--bind", "auto", "--bare"], "--bind auto is applied by hpcdist's wrapper around each rank"),
        (["--bind", "cores"], "--bind 'cores': use one of none, auto"),
    ],
)
def test_mpirun_bind_mistakes(options: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from hpcdist.cli import main

    assert main(["mpirun", "-np", "2", *options, "--dry-run", "--", "python", "x.py"]) == 2
    assert f"hpcdist: error: {message}" in capsys.readouterr().err


def test_sbatch_bind_auto_hands_the_binding_to_the_shim(tmp_path: Path) -> None:
    """torchrun mode: the script hands each worker's shim the binding itself (srun and mpirun modes: below)."""
    from test_render import check_script

    from hpcdist.jobs.sbatch import render_sbatch
    from hpcdist.jobs.sbatchspec import SbatchSpec

    spec = SbatchSpec(("python", "train.py"), nodes=2, gpus_per_node="4", launch="torchrun", python="python3")
    plain, bound = render_sbatch(spec), render_sbatch(replace(spec, bind="auto"))
    check_script(bound, tmp_path)
    assert "HPCDIST_BIND" not in plain and "--cpu-bind" not in plain
    assert "export HPCDIST_BIND=auto\n" in bound
    assert "--cpu-bind=none" in bound  # Slurm's task binding off: the shim splits the node
    assert "--export=ALL,HPCDIST_BIND" in bound
    # torchrun runs no shim of its own: each worker starts through it
    assert "--no_python python3 -m hpcdist.worker -- python train.py" in bound
    with pytest.raises(UsageError, match="--bind 'yes'"):
        render_sbatch(replace(spec, bind="yes"))


def test_sbatch_bind_auto_in_mpirun_mode_is_hpcdist_mpirun_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mpirun mode's step is `hpcdist mpirun --bind auto`, which runs mpirun --bind-to none and tells each shim."""
    from test_render import check_script
    from test_slurm import allocation, exported, from_launcher, launch_words, step_dry_run

    from hpcdist.jobs.sbatch import render_sbatch
    from hpcdist.jobs.sbatchspec import SbatchSpec

    mpirun = str(Path(sys.executable).parent / "mpirun")  # the Open MPI wheel's, beside this Python
    spec = SbatchSpec(("python", "train.py"), nodes=2, gpus_per_node="4", launch="mpirun", mpirun=mpirun,
                      python="python3")  # fmt: skip
    plain, bound = render_sbatch(spec), render_sbatch(replace(spec, bind="auto"))
    check_script(bound, tmp_path)
    step, launcher = ["python3", "-m", "hpcdist", "mpirun", "-np", "8"], ["--mpirun", mpirun, "--mpi", "openmpi"]
    assert launch_words(plain, "python3") == [*step, "-x", "OMP_NUM_THREADS", *launcher, "--", "python", "train.py"]
    assert launch_words(bound, "python3") == [*step, "--bind", "auto", *launcher, "--", "python", "train.py"]
    for text in (plain, bound):  # mpirun's binding and the shim's variable are hpcdist mpirun's to set when it runs
        assert "HPCDIST_BIND" not in text and "--bind-to" not in text and "--cpu-bind" not in text
    assert "export OMP_NUM_THREADS=4\n" in plain and "OMP_NUM_THREADS" not in bound  # auto binding sets each rank's
    # the step's hpcdist mpirun, in a 2-node allocation of 4 tasks each: what it runs
    line = step_dry_run(bound, "python3", {**allocation(2, 4), **exported(bound, "python3")}, monkeypatch, capsys)
    # mpirun's binding off: the shim splits the node
    assert from_launcher(line, mpirun)[:7] == [mpirun, "-np", "8", "--bind-to", "none", "--map-by", "slot"]
    assert " -x HPCDIST_BIND=auto " in shlex.join(line)
    assert line[-6:] == [sys.executable, "-m", "hpcdist.worker", "--", "python", "train.py"]
    plain_line = step_dry_run(plain, "python3", {**allocation(2, 4), **exported(plain, "python3")}, monkeypatch, capsys)
    assert [word for word in plain_line if "HPCDIST_BIND" in word] == []  # no binding asked: the shim binds nothing
    with pytest.raises(UsageError, match="--bind 'yes'"):
        render_sbatch(replace(spec, bind="yes"))


def test_sbatch_bind_auto_in_srun_mode_is_hpcdist_mpirun_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The srun mode's step is `hpcdist mpirun --bind auto`, which runs srun --cpu-bind=none and tells each shim."""
    from test_render import check_script
    from test_slurm import launch_words

    from hpcdist.cli import main
    from hpcdist.jobs.sbatch import render_sbatch
    from hpcdist.jobs.sbatchspec import SbatchSpec

    spec = SbatchSpec(("python", "train.py"), nodes=2, gpus_per_node="4", python="python3")
    plain, bound = render_sbatch(spec), render_sbatch(replace(spec, bind="auto"))
    check_script(bound, tmp_path)
    step = ["python3", "-m", "hpcdist", "mpirun", "-np", "8"]
    assert launch_words(plain, "python3") == [*step, "--mpi", "srun", "--", "python", "train.py"]
    assert launch_words(bound, "python3") == [*step, "--bind", "auto", "--mpi", "srun", "--", "python", "train.py"]
    for text in (plain, bound):  # srun's binding and the shim's variable are hpcdist mpirun's to set when it runs
        assert "HPCDIST_BIND" not in text and "--cpu-bind" not in text
    assert "export OMP_NUM_THREADS=4\n" in plain and "OMP_NUM_THREADS" not in bound  # auto binding sets each rank's
    # the step's hpcdist mpirun, in a 2-node allocation of 4 tasks each: what it runs
    allocation = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "8",
                  "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_CPUS_ON_NODE": "16", "SLURMD_NODENAME": "n1"}  # fmt: skip
    for name in [name for name in os.environ if name.startswith(("SLURM_", "HPCDIST_"))]:
        monkeypatch.delenv(name)
    for name, value in allocation.items():
        monkeypatch.setenv(name, value)
    assert main([*launch_words(bound, "python3")[3:-3], "--dry-run", "--", "python", "train.py"]) == 0
    srun = shlex.split(capsys.readouterr().out)
    assert srun[0] == "env" and "HPCDIST_BIND=auto" in srun[: srun.index("srun")]
    assert srun[srun.index("srun") :] == ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--ntasks=8", "--cpu-bind=none",
                                          "--export=ALL", sys.executable, "-m", "hpcdist.worker", "--", "python",
                                          "train.py"]  # fmt: skip
    with pytest.raises(UsageError, match="--bind 'yes'"):
        render_sbatch(replace(spec, bind="yes"))


def test_doctor_shows_the_plan() -> None:
    from hpcdist.doctor.bindplan import check_binding
    from hpcdist.doctor.facts import Facts

    rows = check_binding(Facts(topology=from_xml("dgx"), local_world_size=8, local_world_size_from="one per GPU"))
    assert [r.status for r in rows] == ["info"] * 9
    assert rows[0].detail.startswith("--bind auto, 8 local ranks (one per GPU): 2 NUMA nodes, 112 cores (224 CPUs)")
    assert rows[3].detail == (
        "local rank 2: 14 cores (CPUs 28-41,140-153) NUMA 0, GPU 0000:3a:00.0, NIC mlx5_0; "
        "NCCL_IB_HCA==mlx5_0, OMP_NUM_THREADS=14"
    )
    user = check_binding(Facts(topology=from_xml("odd7"), local_world_size=1, bind_environ={"OMP_NUM_THREADS": "2"}))
    assert user[1].detail == "local rank 0: 7 cores (CPUs 0-6) NUMA 0"  # the user's OMP_NUM_THREADS stays
    (too_many,) = check_binding(Facts(topology=from_xml("odd7"), local_world_size=9))
    assert too_many.status == "warn" and "9 ranks need a core each" in too_many.fix
    (unread,) = check_binding(Facts(topology_error="no usable CPU"))
    assert unread.status == "warn" and "--topology FILE" in unread.fix
    assert check_binding(Facts()) == []  # not probed: nothing to say


def test_doctor_binding_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcdist.doctor.probe import _binding_facts
    from hpcdist.launching.world import World

    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_ID", "RANK", "WORLD_SIZE", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    facts = _binding_facts(None, str(DATA / "1s4gpu.xml"), World.current())
    assert facts["local_world_size"] == 4 and facts["local_world_size_from"].startswith("one per GPU")
    assert len(facts["topology"].nodes[0].cores) == 32  # a file is planned whole, not cut to this process's CPUs
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "2")
    assert _binding_facts(None, str(DATA / "odd7.xml"), World.current())["local_world_size"] == 2
    assert _binding_facts(3, None, World.current())["local_world_size_from"] == "--local-world-size"
    assert "cannot be read" in _binding_facts(1, "/nonexistent.xml", World.current())["topology_error"]


def test_unknown_device_numa_on_a_one_node_machine_is_that_node(read) -> None:
    t = read("1s4gpu")
    t = replace(t, gpus=tuple(replace(g, numa=None) for g in t.gpus), nics=tuple(replace(n, numa=None) for n in t.nics))
    plan = plan_binding(t, 4)
    assert [device_name(b.gpu) for b in plan] == [g.name for g in t.gpus]
    assert {device_name(b.nic) for b in plan} == {"enp129s0"}
