"""Launching `hpcdist mpirun` across the namespace hosts n1 to n4 of netns.sh, and breaking them.

mpirun runs inside hpc-n1 with hostname n1 and starts what runs on the other hosts through tests/hosts/agent
instead of ssh: PRRTE's daemon (Open MPI) or Hydra's proxy (MPICH). Output goes to files and every wait has a
timeout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NETNS = HERE / "netns.sh"
AGENT = HERE / "agent"
PROGRAMS = HERE / "programs"
BIN = Path(sys.executable).parent  # the venv under test: /tmp/venv0 here, <repo>/.venv in CI
TWO_HOSTS = {"n1": 2, "n2": 2}  # the default layout: shared memory within a host, TCP between the two
FOUR_HOSTS = {"n1": 1, "n2": 1, "n3": 1, "n4": 1}  # one rank per host: TCP between every pair of ranks
# How each MPI's launcher is told to reach n2 through the agent: PRRTE's plm_ssh_agent, Hydra's ssh launcher.
AGENT_SETTINGS = {
    "openmpi": {"PRTE_MCA_plm_ssh_agent": str(AGENT)},
    "mpich": {"HYDRA_LAUNCHER": "ssh", "HYDRA_LAUNCHER_EXEC": str(AGENT)},
}
ADDRESSES = {f"n{k}": f"10.250.0.{k}" for k in range(1, 5)}


@dataclass(frozen=True)
class Result:
    """A finished launch: status, output and how long it took."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


class Launch:
    """`hpcdist mpirun …` running inside n1; output goes to files, so processes left on a lost host
    (which keep mpirun's stderr open) never block the test."""

    def __init__(self, argv: list[str], env: dict[str, str], workdir: Path) -> None:
        self.out, self.err = workdir / "stdout", workdir / "stderr"
        self.start = time.monotonic()
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True)

    def wait(self, timeout: float) -> Result:
        """Wait for the launch to end; a hang kills it and fails the test with what it printed."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            pytest.fail(f"hpcdist mpirun still running after {timeout:g} s; stderr:\n{self.err.read_text()}")
        return Result(code, self.out.read_text(), self.err.read_text(), time.monotonic() - self.start)

    def running(self) -> bool:
        """Whether hpcdist mpirun has not ended yet."""
        return self.proc.poll() is None

    def wait_for_markers(self, directory: Path, pattern: str, count: int, timeout: float = 180) -> None:
        """Wait until `count` files match `pattern` in `directory` (the ranks' ready markers); fail if the job
        ends first or they are not all there within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while len(list(directory.glob(pattern))) < count:
            if not self.running():
                pytest.fail(f"the job ended before all ranks were ready:\n{self.wait(10).stderr}")
            if time.monotonic() > deadline:
                pytest.fail(f"ranks not ready after {timeout:g} s:\n{self.err.read_text()}")
            time.sleep(0.2)


def ranks_on(slots: dict[str, int]) -> dict[int, str]:
    """Each rank's host when ranks fill the hosts' slots in order (`--map-by slot`)."""
    hosts = [host for host, count in slots.items() for _ in range(count)]
    return dict(enumerate(hosts))


class Hosts:
    """The namespace hosts: launching across them with one MPI (Open MPI unless made by on_mpich), and breaking
    them."""

    def __init__(self, tmp: Path, mpi: str = "openmpi", hpcdist: tuple[str, ...] = (str(BIN / "hpcdist"),)) -> None:
        self.tmp = tmp
        self.hostfile = self.hostfile_for(TWO_HOSTS)
        self.mpi, self.hpcdist = mpi, hpcdist

    def hostfile_for(self, slots: dict[str, int]) -> Path:
        """A hostfile giving each host its slots (`n1 slots=2` lines), named after them."""
        path = self.tmp / ("hostfile-" + "-".join(f"{host}x{count}" for host, count in slots.items()))
        path.write_text("".join(f"{host} slots={count}\n" for host, count in slots.items()))
        return path

    def on_mpich(self, python: Path) -> Hosts:
        """The same hosts, launched by `python -m hpcdist` of an MPICH venv (tests/conftest.py's mpich_python)."""
        return Hosts(self.tmp, "mpich", (str(python), "-m", "hpcdist"))

    def launch(
        self,
        hpcdist_args: list[str],
        workdir: Path,
        *,
        slots: dict[str, int] = TWO_HOSTS,
        clean_agent: bool = True,
        doctor: bool = False,
        **env: str,
    ) -> Launch:
        """Start `hpcdist mpirun --hostfile SLOTS -np ALL-SLOTS ARGS` (n1:2,n2:2, 4 ranks, by default) with mpirun
        itself on n1 (`hpcdist ARGS` with doctor), on this Hosts' MPI.

        clean_agent: the agent passes only what ssh would (PATH, HOME, USER…), so a variable reaches the
        ranks on n2 only if hpcdist forwards it with -x.
        """
        argv = [*self.hpcdist, *(hpcdist_args if doctor else
                                 ["mpirun", "--hostfile", str(self.hostfile_for(slots)),
                                  "-np", str(sum(slots.values())), *hpcdist_args])]  # fmt: skip
        return self.on_n1(argv, workdir, clean_agent=clean_agent, **env)

    def on_n1(self, argv: list[str], workdir: Path, *, clean_agent: bool = True, **env: str) -> Launch:
        """Start `argv` inside n1 (hostname n1), as `launch` starts hpcdist mpirun there: with the agent for this Hosts'
        MPI, and as root."""
        full_env = {
            **os.environ,
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            **AGENT_SETTINGS[self.mpi],
            "HPCDIST_AGENT_ENV": "clean" if clean_agent else "",
            "HPCDIST_TIMEOUT": "120",
            "HPCDIST_MARKER_DIR": str(workdir),
            **env,
        }
        on_n1 = ["ip", "netns", "exec", "hpc-n1", "unshare", "--uts", "sh", "-c", 'hostname n1 && exec "$@"', "sh"]
        return Launch([*on_n1, *argv], full_env, workdir)

    @staticmethod
    def pids(host: str) -> list[int]:
        """Processes running on a host (in its network namespace)."""
        out = subprocess.run(["ip", "netns", "pids", f"hpc-{host}"], capture_output=True, text=True, check=False)
        return [int(word) for word in out.stdout.split()]

    def kill(self, host: str) -> None:
        """SIGKILL everything on a host, as if it had crashed (all of it was started by these tests)."""
        for pid in self.pids(host):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    @staticmethod
    def link(host: str, state: str) -> None:
        """Bring a host's eth0 up or down (a cut cable)."""
        subprocess.run(["ip", "-n", f"hpc-{host}", "link", "set", "eth0", state], check=True)

    @staticmethod
    def second_interface(host: str, address: str) -> None:
        """Give a host a second interface `eth1` (ADDRESS/24, reaching no other host), and make its own name
        resolve to that address there, as on clusters whose hostname names the management network."""
        ns = f"hpc-{host}"
        # a veth pair with both ends on the host (the kernel here has no dummy links): eth1 leads nowhere else
        subprocess.run(["ip", "-n", ns, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1-end"], check=True)
        subprocess.run(["ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth1"], check=True)
        for link in ("eth1", "eth1-end"):
            subprocess.run(["ip", "-n", ns, "link", "set", link, "up"], check=True)
        etc = Path(f"/etc/netns/{ns}/hosts")
        lines = [line for line in etc.read_text().splitlines() if not line.endswith(f" {host}")]
        etc.write_text("\n".join([*lines, f"{address} {host}", f"::ffff:{address} {host}"]) + "\n")

    def reset(self) -> None:
        """Links up, no second interface, names as netns.sh wrote them, and no leftover processes."""
        for host, address in ADDRESSES.items():
            self.link(host, "up")
            self.kill(host)
            ns = f"hpc-{host}"
            if (
                subprocess.run(["ip", "-n", ns, "link", "show", "eth1"], capture_output=True, check=False).returncode
                == 0
            ):
                subprocess.run(["ip", "-n", ns, "link", "del", "eth1"], check=True)
            etc = Path(f"/etc/netns/{ns}/hosts")
            lines = [line for line in etc.read_text().splitlines() if not line.endswith(f" {host}")]
            etc.write_text("\n".join([*lines, f"{address} {host}", f"::ffff:{address} {host}"]) + "\n")
