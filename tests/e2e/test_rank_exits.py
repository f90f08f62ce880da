"""How a rank's ending is reported: exit codes as the OS makes them, signals by name, programs that cannot start."""

from __future__ import annotations

import pytest
from launching import launch

EXIT_ON_RANK_1 = "import os, sys\nif os.environ['RANK'] == '1':\n    sys.exit({code})\n"


@pytest.mark.parametrize(("code", "status"), [(-1, 255), (-100, 156)])
def test_a_negative_sys_exit_is_reported_as_the_exit_code_the_os_makes(hpcdist: str, code: int, status: int) -> None:
    result = launch(
        [hpcdist, "mpirun", "-np", "2", "--", "python", "-c", EXIT_ON_RANK_1.format(code=code)], timeout=120
    )
    assert "hpcdist: first failure: rank 1 on " in result.stderr and f" failed with exit code {status}" in result.stderr
    assert result.returncode == status, result.stderr
    assert "killed by" not in result.stderr and "Traceback" not in result.stderr


def test_a_child_killed_by_a_signal_python_has_no_name_for_is_reported_by_number(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", "sh", "-c", "kill -s 40 $$"], timeout=120)
    assert result.stderr.count("killed by signal 40") == 1, result.stderr  # named once, by number
    assert result.returncode == 128 + 40 and "Traceback" not in result.stderr  # the status, as a shell gives it


@pytest.mark.parametrize(
    ("program", "message"),
    [
        ("/no/such-binary", "program '/no/such-binary' does not exist; check the path"),
        ("no-such-binary", "program 'no-such-binary' not found on PATH; check the name"),
    ],
)
def test_a_program_that_does_not_exist_is_a_clear_error_with_status_2(hpcdist: str, program: str, message: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", program, "--flag"], timeout=120)
    assert result.returncode == 2, result.stderr
    assert "hpcdist: error: rank " in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr
