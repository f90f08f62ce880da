"""The unit tier's rule: a test leaves os.environ as it found it, so no test sees what another set.

A test that changes the environment does it through monkeypatch (which puts it back); one that leaves a change
behind, itself or through the code it calls, fails naming the variables, and the environment is put back.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

OWN = "PYTEST_CURRENT_TEST"  # pytest's own, changed at each stage of a test


@pytest.fixture(autouse=True)
def _environ_kept() -> Iterator[None]:
    """Fail the test after which os.environ differs from before it (and undo the difference)."""
    before = {name: value for name, value in os.environ.items() if name != OWN}
    yield
    after = {name: value for name, value in os.environ.items() if name != OWN}
    if after == before:
        return
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    for name in after.keys() - before.keys():
        del os.environ[name]
    os.environ.update(before)
    pytest.fail(f"the test left os.environ changed: {', '.join(changed)} (set them with monkeypatch)")
