"""The sanitizers are live where the tier says they are, and the normal build has none of the test builds' flags.

ThreadSanitizer reports the test build's deliberate race, each test build is instrumented, and the normal build has
neither instrumentation nor the test hooks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rank_env import rank_environ
from reports import check

Built = Callable[[str | None], Path]  # the test_build fixture
RACE = "from hpcdist.mpi_backend.building import build; print(build().testing.race(100000))"


def undefined(library: Path) -> set[str]:
    """The symbols `library` takes from elsewhere (nm -D)."""
    listed = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True, check=True,
                            timeout=60)  # fmt: skip
    return {line.split()[-1] for line in listed.stdout.splitlines() if line.strip()}


def test_thread_sanitizer_reports_the_test_build_s_deliberate_race(tmp_path: Path, test_build: Built) -> None:
    library = test_build("tsan")
    logs = tmp_path / "logs"
    logs.mkdir()
    environ = {**os.environ, **rank_environ("tsan", logs)}
    ran = subprocess.run([sys.executable, "-c", RACE], env=environ, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr  # the tier judges the reports from the log (exitcode=0)
    assert ran.stdout.strip() in {str(n) for n in range(100000, 200001)}, ran.stdout
    problems, _ = check(logs, 1, library, [])
    assert len(problems) == 1, problems
    assert "ThreadSanitizer: data race; in the backend:" in problems[0], problems
    assert "hpcdist_testing::race(int)" in problems[0] and " testing.h:" in problems[0], problems


@pytest.mark.parametrize(
    ("sanitizer", "instrumented"),
    [
        ("tsan", {"__tsan_init", "__tsan_func_entry"}),
        ("asan", {"__asan_init", "__ubsan_handle_type_mismatch_v1_abort"}),
    ],
)
def test_each_test_build_is_instrumented_for_its_sanitizer(
    test_build: Built, sanitizer: str, instrumented: set[str]
) -> None:
    assert instrumented <= undefined(test_build(sanitizer))


def test_the_normal_build_has_no_instrumentation_and_no_test_hooks(test_build: Built) -> None:
    from hpcdist.mpi_backend import building

    library = test_build(None)
    assert not [name for name in undefined(library) if name.startswith(("__tsan", "__asan", "__ubsan"))]
    assert not hasattr(building.build(), "testing")
