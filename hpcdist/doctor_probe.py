"""Probes for `hpcdist doctor`: run each command through hpcdist.run.capture with a timeout, return Facts."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .doctor import DEFAULT_TIMEOUT, Facts, Probe, mpi_identity, tail
from .hostfile import HostSlots
from .mpirun import locate_mpirun

__all__ = ["gather_facts", "rendezvous_probe"]

_MPI4PY_PROBE = (
    "import json, mpi4py; mpi4py.rc.initialize = False; mpi4py.rc.finalize = False; from mpi4py import MPI; "
    "print(json.dumps({'version': mpi4py.__version__, 'library': MPI.Get_library_version(), "
    "'module': MPI.__file__}))"
)
_TORCH_PROBE = (
    "import json, torch, torch.distributed as d; a = d.is_available(); c = torch.cuda.is_available(); "
    "print(json.dumps({'version': torch.__version__, 'distributed': a, 'gloo': a and d.is_gloo_available(), "
    "'nccl': a and d.is_nccl_available(), 'mpi': a and d.is_mpi_available(), 'cuda': c, "
    "'cuda_devices': torch.cuda.device_count() if c else 0}))"
)
_WORLD_PROBE = ("import os; from mpi4py import MPI; c = MPI.COMM_WORLD; "  # one write(2) per line: ranks share the pipe
                "os.write(1, f'hpcdist-world {c.Get_rank()} {c.Get_size()}\\n'.encode())")
_HOST_PROBE = 'echo hpcdist-host "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-?}}" "$(hostname)"'


def _probe(argv: Sequence[str], timeout: float) -> Probe:
    from .run import capture

    code, out, err = capture(argv, timeout)
    return Probe(tuple(argv), code, out, err)


def _json_probe(code: str, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """Run `python -c code` printing one JSON line: (data, error text)."""
    probe = _probe([sys.executable, "-c", code], timeout)
    if probe.code == 0:
        try:
            return json.loads(probe.out.strip().splitlines()[-1]), ""
        except (ValueError, IndexError):
            pass
    return None, "timed out" if probe.code is None else (tail(probe.err, 1) or f"exit {probe.code}")


def _interfaces() -> dict[str, str]:
    """Network interfaces of this host and their operstate, from /sys/class/net."""
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        names = [name for _, name in socket.if_nameindex()]
    states = {}
    for name in names:
        try:
            with open(f"/sys/class/net/{name}/operstate") as fh:
                states[name] = fh.read().strip()
        except OSError:
            states[name] = "unknown"
    return states


def _resolve(host: str) -> str | None:
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    except (OSError, IndexError):
        return None


def _mpirun_flags(family: str | None, hosts: tuple[HostSlots, ...], hostfile: str | None, mpich_form: bool) -> list[str]:
    """Options for the probe launches: root, oversubscription and no binding for Open MPI; the hosts."""
    flags = []
    if family in (None, "Open MPI"):
        flags += ["--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            flags.append("--allow-run-as-root")
        if "OMPI_MCA_btl" not in os.environ:
            flags += ["--mca", "btl", "^ofi"]
    if hosts:
        flags += ["--map-by", "node"] if family in (None, "Open MPI") else []
        flags += ["-H", ",".join(f"{h.host}:{h.slots}" for h in hosts)] if mpich_form or not hostfile else ["--hostfile", hostfile]
    return flags


def gather_facts(hostfile: str | None = None, mpirun: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> Facts:
    """Probe this machine (and the hostfile's hosts); every command runs with `timeout`."""
    from .errors import UsageError
    from .hostfile import is_mpich_form, parse_hostfile, read_hostfile_text

    mpirun = mpirun or locate_mpirun()
    with ThreadPoolExecutor(max_workers=2) as pool:
        torch_job = pool.submit(_json_probe, _TORCH_PROBE, max(timeout, 60.0))  # `import torch` alone takes ~4 s
        mpi4py, mpi4py_error = _json_probe(_MPI4PY_PROBE, timeout)
        version = _probe([mpirun, "--version"], timeout) if mpirun else None
        torch_facts, torch_error = torch_job.result()
    family = (mpi_identity(version.out + version.err) or (None, None))[0] if version else None
    hosts: tuple[HostSlots, ...] = ()
    hostfile_error, mpich_form = "", False
    if hostfile:
        try:
            text = read_hostfile_text(hostfile)
            hosts, mpich_form = parse_hostfile(text, hostfile), is_mpich_form(text)
        except UsageError as exc:
            hostfile_error = str(exc)
    resolved = {h.host: _resolve(h.host) for h in hosts}
    can_launch = mpirun is not None and mpi4py is not None
    flags = _mpirun_flags(family, hosts, hostfile, mpich_form)
    world = _probe([mpirun, *_mpirun_flags(family, (), None, False), "-np", "2", sys.executable, "-c", _WORLD_PROBE],
                   timeout) if can_launch else None
    hosts_probe = None
    if mpirun and hosts and all(resolved.values()):
        hosts_probe = _probe([mpirun, *flags, "-np", str(len(hosts)), "sh", "-c", _HOST_PROBE], timeout)
    np = min(sum(h.slots for h in hosts), 16) if hosts else 2
    np = max(np, 2)
    rendezvous = None
    if can_launch and (not hosts or (hosts_probe is not None and hosts_probe.code == 0)):
        program = f"from hpcdist.doctor_probe import rendezvous_probe; rendezvous_probe({timeout / 3:.1f})"
        rendezvous = _probe([mpirun, *flags, "-np", str(np), sys.executable, "-c", program], timeout)
    hostname = socket.gethostname()
    return Facts(
        mpirun=mpirun, mpirun_version=version, mpi4py=mpi4py, mpi4py_error=mpi4py_error, world=world,
        torch=torch_facts, torch_error=torch_error,
        hpcdist_mpi_backend=importlib.util.find_spec("hpcdist.mpi_backend") is not None,
        environ={k: v for k, v in os.environ.items() if k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")},
        interfaces=_interfaces(), hostname=hostname, hostname_address=_resolve(hostname),
        hostfile=hostfile, hosts=hosts, hostfile_error=hostfile_error, resolved=resolved,
        hosts_probe=hosts_probe, rendezvous=rendezvous, rendezvous_np=np,
    )


def rendezvous_probe(timeout: float = 10.0) -> None:
    """Run in every rank of the doctor's mpirun job: rank 0 listens, the others connect; each prints a line."""
    from mpi4py import MPI

    from .rendezvous import host_address, pick_address

    def say(line: str) -> None:  # one write(2) per line: the ranks share mpirun's stdout pipe
        os.write(1, (line + "\n").encode())

    comm = MPI.COMM_WORLD
    rank, size, host = comm.Get_rank(), comm.Get_size(), socket.gethostname()
    hosts = comm.allgather(host)
    server, where = None, ("", 0)
    if rank == 0:
        try:
            addr = pick_address(hosts, host_address() if len(set(hosts)) > 1 else "127.0.0.1")
            server = socket.create_server((addr, 0))
            server.settimeout(timeout)
            where = (addr, server.getsockname()[1])
        except Exception as exc:  # noqa: BLE001 - reported, never raised: a raise would hang mpirun
            say(f"hpcdist-rdzv 0 {host} error cannot listen: {exc}")
    where = comm.bcast(where)
    if rank == 0 and server is not None:
        say(f"hpcdist-rdzv 0 {host} ok {where[0]}:{where[1]}")
        accepted = []
        try:
            while len(accepted) < size - 1:
                conn, _ = server.accept()
                with conn:
                    conn.settimeout(timeout)
                    accepted.append(conn.recv(16).decode().strip())
        except OSError:
            pass
        say(f"hpcdist-rdzv-accepted {','.join(sorted(accepted, key=lambda r: int(r) if r.isdigit() else 0)) or '-'}")
        server.close()
    elif rank != 0:
        if not where[0]:
            say(f"hpcdist-rdzv {rank} {host} error rank 0 could not listen")
        else:
            try:
                with socket.create_connection(where, timeout=timeout) as conn:
                    conn.sendall(f"{rank}\n".encode())
                say(f"hpcdist-rdzv {rank} {host} ok {where[0]}:{where[1]}")
            except OSError as exc:
                say(f"hpcdist-rdzv {rank} {host} error {where[0]}:{where[1]}: {exc}")
    comm.Barrier()
