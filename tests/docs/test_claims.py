"""Every example of README.md and docs/**/*.md is claimed by exactly one tier, and that tier's tests collect it."""

from __future__ import annotations

import re
import subprocess
import sys

from doc_examples import ROOT, TIERS, collect, documents, parse

# where each tier's examples are collected, relative to the checkout
TIER_TESTS = {
    "docs": "tests/docs/test_examples_docs.py",
    "cluster": "tests/cluster/test_examples_slurm.py",
    "hosts": "tests/hosts/test_examples_hosts.py",
    "containers": "tests/containers/test_examples_containers.py",
}


def test_every_example_has_one_tier() -> None:
    """The runnable blocks are the disjoint union of the tiers' collections."""
    runnable = [block.where for path in documents() for block in parse(path) if block.runs]
    claimed = [block.where for tier in TIERS for block in collect(tier)]
    assert sorted(claimed) == sorted(runnable)
    assert len(set(claimed)) == len(claimed)


def test_each_tier_collects_its_examples() -> None:
    """pytest --collect-only of the three tiers' example tests lists each tier's examples under that tier's file
    (under this run's CI setting: with CI=true an unknown language fails the collection)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *TIER_TESTS.values()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.findall(r"^(\S+\.py)::test_example\[(.+)\]$", done.stdout, re.MULTILINE)
    expected = [(TIER_TESTS[tier], block.where) for tier in TIERS for block in collect(tier)]
    assert sorted(found) == sorted(expected)
