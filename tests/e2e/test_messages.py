"""What a newcomer's mistakes print: one hpcdist line saying what, where and how to fix it, once per job."""

from __future__ import annotations

from pathlib import Path

import pytest
from launching import launch

pytestmark = pytest.mark.e2e


def test_a_host_that_does_not_resolve_is_named_before_anything_starts(hpcdist: str) -> None:
    result = launch([hpcdist, "mpirun", "-np", "2", "-H", "nosuchhost:1,localhost:1", "--", "true"], timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "hpcdist: error: host 'nosuchhost' (from -H nosuchhost:1,localhost:1) does not resolve on this machine, so "
        "mpirun could not start its daemon there; fix the name or remove it\n"
    )


def test_a_hostfile_s_unknown_host_is_named_with_its_line(hpcdist: str, tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two hosts\nlocalhost slots=1\nnosuchhost slots=1\n")
    result = launch([hpcdist, "mpirun", "-np", "2", "--hostfile", str(hostfile), "--", "true"], timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"hpcdist: error: host 'nosuchhost' (from hostfile {hostfile} line 3) does not resolve on this machine, so "
        "mpirun could not start its daemon there; fix the name or remove it\n"
    )


def test_a_daemon_that_cannot_be_started_names_its_host(hpcdist: str, tmp_path: Path) -> None:
    agent = tmp_path / "agent"  # a launch agent that cannot reach the host, as ssh does (status 255)
    agent.write_text('#!/bin/sh\necho "agent: cannot reach $1" >&2\nexit 255\n')
    agent.chmod(0o755)
    argv = [hpcdist, "mpirun", "-np", "2", "-H", "otherhost:1,localhost:1", "--launch-agent", str(agent), "--", "true"]
    result = launch(argv, timeout=60)
    assert result.returncode == 255, result.stderr
    assert "agent: cannot reach otherhost\n" in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "hpcdist: error: mpirun could not start its daemon on host otherhost (its launch agent, ssh unless "
        "--launch-agent names another, ended with status 255), so the job did not run (mpirun returned 255); check "
        "that `ssh otherhost true` works from here without a password, and that this Python environment exists "
        "there at the same path"
    )
