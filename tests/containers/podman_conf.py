"""The containers.conf podman needs on this project's machines (the container tier's, and `make test`'s background
image build): runc, with limits no higher than this process's.

    python tests/containers/podman_conf.py PATH

On these machines (Firecracker VMs, cgroup v1 with an empty cgroup2 beside it) Debian 12's crun 1.8.1 cannot start a
container ("cgroups in hybrid mode not supported"), and neither runtime may raise a container's RLIMIT_NPROC or
RLIMIT_NOFILE (no CAP_SYS_RESOURCE): podman reads this file from CONTAINERS_CONF (containers.conf(5)).
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

__all__ = ["write"]

NPROC = 32768  # runc here refused 65536 and took 32768 for a container's RLIMIT_NPROC (measured)


def _limit(which: int, most: int | None = None) -> str:
    """A ulimit value `soft:hard` no higher than this process's (nor `most`)."""
    soft, hard = resource.getrlimit(which)
    cap = [v for v in (soft, hard, most) if v is not None and v != resource.RLIM_INFINITY]
    top = min(cap) if cap else 1048576
    return f"{top}:{top}"


def write(path: Path) -> Path:
    """Write the containers.conf to `path`; `path`."""
    nofile, nproc = _limit(resource.RLIMIT_NOFILE), _limit(resource.RLIMIT_NPROC, NPROC)
    limits = f'default_ulimits = ["nofile={nofile}", "nproc={nproc}"]'
    path.write_text(f'[containers]\n{limits}\n[engine]\nruntime = "runc"\n')
    return path


if __name__ == "__main__":
    write(Path(sys.argv[1]))
