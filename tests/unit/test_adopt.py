"""The shim's import hook in a fresh one-process interpreter: adopt() loads no torch, and the program's own
init_process_group then gets hpcdist's timeout, and the mpi backend on a wheel without native MPI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

PROGRAM = """
import sys
from hpcdist.runtime.adopt import adopt
from hpcdist.runtime.prepare import prepare
from hpcdist.runtime.process import current

process = current()
env, _ = prepare(process, 7.0)
adopt(process, env, 7.0)
print("torch loaded:", "torch" in sys.modules)
import torch.distributed as dist
print("wrapped:", hasattr(dist.init_process_group, "_hpcdist_original"))
dist.init_process_group(sys.argv[1])
print("backend", dist.get_backend(), "timeout", dist.distributed_c10d._get_default_store().timeout.total_seconds())
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(("backend", "runs_on"), [("gloo", "gloo"), ("mpi", "mpi4py")])
def test_the_hook_wraps_init_process_group_when_torch_distributed_is_imported(backend: str, runs_on: str) -> None:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, backend], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    # one process is no MPI launch: no forensics, so torch's timeout is hpcdist's own 7 s
    assert proc.stdout.splitlines() == ["torch loaded: False", "wrapped: True", f"backend {runs_on} timeout 7.0"]
