"""How a rank's ending is reported: exit codes as the OS makes them, signals by name, programs that cannot start."""

from __future__ import annotations

import pytest

from launching import launch


@pytest.mark.parametrize(("program", "message"), [
    ("/no/such-binary", "program '/no/such-binary' does not exist; check the path"),
    ("no-such-binary", "program 'no-such-binary' not found on PATH; check the name"),
])
def test_a_program_that_does_not_exist_is_a_clear_error_with_status_2(hpcdist: str, program: str,
                                                                      message: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "--", program, "--flag"], timeout=120)
    assert result.returncode == 2, result.stderr
    assert "hpcdist: error: rank " in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr
