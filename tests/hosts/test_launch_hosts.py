"""`hpcdist.launch(fn, hostfile=...)` across the two namespace hosts: values in rank order, a failure on n2."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

from netns_hosts import AGENT, Hosts, Launch

DRIVER = """
    import json, socket, sys, hpcdist, torch, torch.distributed as dist
    def where(x):
        total = torch.ones(1)
        dist.all_reduce(total)
        return [dist.get_rank(), socket.gethostname(), total.item(), x]
    def fails_on_n2():
        if socket.gethostname() == "n2":
            raise KeyError("only on n2")
        dist.barrier()
    print(json.dumps({"values": hpcdist.launch(where, 7, hostfile=sys.argv[1], backend="gloo", timeout=200)}))
    try:
        hpcdist.launch(fails_on_n2, hostfile=sys.argv[1], backend="gloo", timeout=200)
    except hpcdist.RankFailed as exc:
        print(json.dumps({"failed": [exc.rank, exc.host, exc.kind]}))
"""


def test_launch_runs_a_function_on_the_hostfiles_hosts(cluster: Hosts, tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER))
    shared = tmp_path / "shared"  # the launch directory: both hosts see this machine's filesystem
    shared.mkdir()
    env = {
        **os.environ,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "PRTE_MCA_plm_ssh_agent": str(AGENT),
        "HPCDIST_AGENT_ENV": "clean",
        "HPCDIST_LAUNCH_DIR": str(shared),
    }
    argv = [
        "ip", "netns", "exec", "hpc-n1", "unshare", "--uts", "sh", "-c", 'hostname n1 && exec "$@"', "sh",
        sys.executable, str(driver), str(cluster.hostfile),
    ]  # fmt: skip
    result = Launch(argv, env, tmp_path).wait(400)
    assert result.returncode == 0, result.stderr
    out = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert out[0] == {"values": [[0, "n1", 4.0, 7], [1, "n1", 4.0, 7], [2, "n2", 4.0, 7], [3, "n2", 4.0, 7]]}
    rank, host, kind = out[1]["failed"]
    assert (rank in (2, 3), host, kind) == (True, "n2", "KeyError")
    assert list(shared.iterdir()) == []
