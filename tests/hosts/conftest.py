"""Fixtures for the multi-host tests: hosts hpc-n1 and hpc-n2 (network namespaces) for the session.

Needs root (network namespaces); otherwise every test that uses them is skipped with the reason, which
tests/conftest.py turns into a failure under CI=true.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from netns_hosts import NETNS, Hosts


def _netns(action: str) -> float:
    """Run netns.sh ACTION and return how long it took."""
    start = time.monotonic()
    done = subprocess.run([str(NETNS), action], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        pytest.fail(f"tests/hosts/netns.sh {action} failed:\n{done.stderr}")
    return time.monotonic() - start


@pytest.fixture(scope="session")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    """Hosts hpc-n1 and hpc-n2 for the whole session, removed again at the end."""
    if os.geteuid() != 0:
        pytest.skip("multi-host tests need root to create network namespaces (tests/hosts/netns.sh)")
    missing = [cmd for cmd in ("ip", "unshare", "hostname") if shutil.which(cmd) is None]
    if missing:
        pytest.skip(f"multi-host tests need {', '.join(missing)} (apt-get install iproute2 util-linux hostname)")
    seconds = _netns("up")
    print(f"\nnetns up: {seconds:.2f} s", file=sys.stderr)
    try:
        yield Hosts(tmp_path_factory.mktemp("hosts"))
    finally:
        print(f"\nnetns down: {_netns('down'):.2f} s", file=sys.stderr)


@pytest.fixture
def cluster(hosts: Hosts) -> Iterator[Hosts]:
    """The hosts, healed after the test (links up, leftover processes killed)."""
    hosts.reset()
    try:
        yield hosts
    finally:
        hosts.reset()


@pytest.fixture(params=["openmpi", "mpich"])
def mpi_cluster(request: pytest.FixtureRequest, cluster: Hosts) -> Hosts:
    """The healed hosts, launched on Open MPI and then on MPICH (its venv made only for the MPICH case)."""
    if request.param == "openmpi":
        return cluster
    return cluster.on_mpich(request.getfixturevalue("mpich_python"))
