"""The docs' examples marked `<!-- example: tier=hosts -->`, run on the namespace host n1, which reaches n2 through
tests/hosts/agent instead of ssh (tests/doc_examples.py)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from doc_examples import Block
from doc_runner import Run, collect_or_fail, run_example, runs
from netns_hosts import AGENT_SETTINGS, Hosts

BLOCKS = collect_or_fail("hosts")
# PRRTE's warning when the agent (faster than ssh) has exec'd before mpirun's setpgid on it: not in the examples
AGENT_RACE = re.compile(r"plm:ssh: Warning: setpgid\(\d+,\d+\) failed in parent with errno=Permission denied\(13\)")


@pytest.fixture(scope="module")
def host_runs(hosts: Hosts) -> Iterator[Callable[[Block], Run]]:
    """One Run per document, its commands run on n1 (with hostname n1) as from a login there."""
    agent = {**AGENT_SETTINGS["openmpi"], **AGENT_SETTINGS["mpich"], "HPCDIST_AGENT_ENV": "clean"}
    on_n1 = ["ip", "netns", "exec", "hpc-n1", "unshare", "--uts", "sh", "-c", 'hostname n1 && exec "$@"', "sh"]
    yield from runs(lambda argv: [*on_n1, *argv], "hosts", agent, AGENT_RACE)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_example(block: Block, host_runs: Callable[[Block], Run], cluster: Hosts) -> None:
    """The example runs after its document's earlier hosts ones, and its output and exit status are as shown; the
    hosts are healed after it."""
    run_example(host_runs, block)


if not BLOCKS:  # no example in this tier: no test (an empty parametrization would be a skip)
    del test_example
