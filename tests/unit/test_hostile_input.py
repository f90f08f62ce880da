"""No input breaks hpcdist: each hostile case through the CLI in-process, as `hpcdist: error: …` and exit 2."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from hpcdist.cli import INTERNAL_ERROR, main
from hpcdist.errors import UsageError, WaitTimeout
from hpcdist.hosts import HostSlots
from hpcdist.jobs.examples import main as examples_main
from hpcdist.jobs.profiles import parse_env_file
from hpcdist.launching.hostfile import parse_hostfile
from hpcdist.runtime.env import LaunchEnv
from hpcdist.runtime.prepare import job_timeout

HUGE = "9" * 5000  # past Python's int-to-str limit (4300 digits)
OMPI = {
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
}


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No launcher, Slurm, template or debug variables from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith(("OMPI_", "PMIX", "PMI_", "SLURM_", "MV2_", "HPCDIST_", "MPI_")) or name in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "GROUP_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
        ):
            monkeypatch.delenv(name)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """main(argv) -> (status, stdout, stderr)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run argv, which must fail as a clear usage error; return the message."""
    status, _, err = run(capsys, *argv)
    assert status == 2 and err.startswith("hpcdist: error: ") and "Traceback" not in err, (status, err)
    return err


DRY = ("mpirun", "--dry-run", "--mpirun", "mpirun")


def at_most(option: str, limit: int, got: str, command: str) -> str:
    """The refusal of a whole number past its limit."""
    return f"{option} must be at most {limit}, got {got}; e.g. {option} 1; see `hpcdist {command} --help`"


DIGITS = "a number of 5000 digits"
WHOLE = "is not a whole number; write it in ASCII digits 0-9 alone (no sign, blank or '_'), e.g."
SIGNAL = (
    "expected SIGNAL@SECONDS with SIGNAL one of USR1, USR2, TERM, INT, HUP, QUIT, ALRM, CONT and 1 to 65535 seconds, "
    "e.g. USR1@90; see `hpcdist sbatch --help`"
)
GPUS = (
    "expected COUNT or TYPE:COUNT with COUNT a whole number from 1 to 2147483647, e.g. 8 or a100:8; "
    "see `hpcdist sbatch --help`"
)


# Integers past Python's int-to-str limit, and absurd ones: the whole message
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((*DRY, "-np", "9999999999", "--", "x"), at_most("-np", 2147483647, "9999999999", "mpirun")),
        ((*DRY, "-np", HUGE, "--", "x"), at_most("-np", 2147483647, DIGITS, "mpirun")),
        (
            (*DRY, "-H", f"a:{HUGE}", "--", "x"),
            f"-H 'a:{HUGE}': slots must be at most 2147483647 (MPI counts ranks in an int), got '{HUGE}'",
        ),
        (("sbatch", "--nodes", "99999999999", "--", "x"), at_most("--nodes", 2147483647, "99999999999", "sbatch")),
        (("sbatch", "--nodes", HUGE, "--", "x"), at_most("--nodes", 2147483647, DIGITS, "sbatch")),
        (("sbatch", "--nodes", "²", "--", "x"), f"--nodes '²' {WHOLE} --nodes 1; see `hpcdist sbatch --help`"),
        (
            ("sbatch", "--nodes", "65536", "--ntasks-per-node", "65536", "--", "x"),
            "--nodes 65536 x 65536 tasks per node is more than the 2147483647 ranks MPI can count; ask for fewer",
        ),
        (("sbatch", "--requeue", "--requeue-signal", "USR1@²", "--", "x"), f"--requeue-signal 'USR1@²': {SIGNAL}"),
        (
            ("sbatch", "--requeue", "--requeue-signal", f"USR1@{HUGE}", "--", "x"),
            f"--requeue-signal 'USR1@{HUGE}': {SIGNAL}",
        ),
        (("sbatch", "--gpus-per-node", HUGE, "--", "x"), f"--gpus-per-node '{HUGE}': {GPUS}"),
        (("torchrun", "--master-port", HUGE, "--", "t.py"), at_most("--master-port", 65535, DIGITS, "torchrun")),
        (("torchrun", "--master-port", "70000", "--", "t.py"), at_most("--master-port", 65535, "70000", "torchrun")),
        (
            ("torchrun", "--nproc-per-node", "²", "--", "t.py"),
            f"--nproc-per-node '²' {WHOLE} --nproc-per-node 1, or one of auto, gpu, cpu; see `hpcdist torchrun --help`",
        ),
        (("hostfile", "--hosts", "a", "--slots", HUGE), at_most("--slots", 2147483647, DIGITS, "hostfile")),
        (("run", "ddp", "--epochs", HUGE), at_most("--epochs", 2147483647, DIGITS, "run")),
        (("run", "ddp", "--seed", HUGE), at_most("--seed", 2**62, DIGITS, "run")),
    ],
)
def test_huge_and_absurd_integers_are_refused(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    assert refused(capsys, *argv) == f"hpcdist: error: {message}\n"


def test_a_hostfile_with_a_huge_slot_count(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text(f"node1 slots={HUGE}\n")
    assert "slots must be at most 2147483647" in refused(capsys, *DRY, "--hostfile", str(tmp_path / "hosts"), "--", "x")


NO_SECONDS = "is not a number of seconds; write ASCII digits with an optional fraction, e.g. --timeout 30"
POSITIVE = "must be a positive number of seconds, got {got}; give a finite number up to 2592000 (30 days), e.g."


@pytest.mark.parametrize(
    ("value", "why"),
    [(v, f"--timeout {v!r} {NO_SECONDS}") for v in ("inf", "nan", "1e300", "-1", "soon")]
    + [("0", f"--timeout {POSITIVE.format(got='0.0')} --timeout 30")],
)
@pytest.mark.parametrize("command", [("run", "p2p"), ("bench", "all_reduce"), ("doctor",)])
def test_timeouts_must_be_finite_positive_seconds(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...], value: str, why: str
) -> None:
    message = f"hpcdist: error: {why}; see `hpcdist {command[0]} --help`\n"
    assert refused(capsys, *command, "--timeout", value) == message


@pytest.mark.parametrize(
    ("value", "why"),
    [(v, "is not a number of seconds; set e.g.") for v in ("inf", "nan", "1e300", "-inf")]
    + [("0", POSITIVE.format(got="0.0")), ("2592001", POSITIVE.format(got="2592001.0"))],
)
def test_hpcdist_timeout_must_be_finite_positive_seconds(value: str, why: str) -> None:
    with pytest.raises(UsageError) as refusal:
        job_timeout({"HPCDIST_TIMEOUT": value})
    assert str(refusal.value) == f"HPCDIST_TIMEOUT={value!r} {why} HPCDIST_TIMEOUT=300"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("-b", "9" * 400 + "G"), "--minbytes '9"),
        (("-e", "2T"), "--maxbytes '2T' is not a size"),
        (("-e", "2048G"), "more than 1T"),
        (("-b", "0", "-e", "1G", "-i", "1"), "more than 1000 sizes"),
        (("-b", "٨"), "is not a size in bytes"),
    ],
)
def test_bench_sizes_that_overflow(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], needle: str) -> None:
    assert needle in refused(capsys, "bench", "all_reduce", *argv)


# Text: non-ASCII, undecodable bytes, broken site templates.
def test_a_non_ascii_job_name_is_written_with_o(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "job.sbatch"
    assert run(capsys, "sbatch", "-J", "héllo 中", "--write", str(target), "--", "x") == (0, "", "")
    assert '#SBATCH --job-name="héllo 中"' in target.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "argv",
    [
        ("sbatch", "-J", "h\udcffllo", "--", "x"),
        ("sbatch", "--", "python", "tr\udcffin.py"),
        (*DRY, "-np", "2", "--", "caf\udce9"),
    ],
)
def test_bytes_that_are_not_utf8_are_refused(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    assert "not UTF-8" in refused(capsys, *argv)


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        (b"#!/bin/bash\n\xff\xfe\n", "cannot read template 'sbatch.sh.j2'"),
        (b"#!/bin/bash\n{{ 1 // 0 }}\n", "sbatch.sh.j2:2 failed: ZeroDivisionError"),
        (b"#!/bin/bash\n{{ 'a' + 1 }}\n", "failed: TypeError"),
        (b"#!/bin/bash\nif then\n", "`bash -n` refuses the generated script"),
    ],
)
def test_a_broken_site_template(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, template: bytes, needle: str
) -> None:
    (tmp_path / "sbatch.sh.j2").write_bytes(template)
    assert needle in refused(capsys, "sbatch", "--template-dir", str(tmp_path), "--", "x")


# A file where a directory is expected, and the reverse.
def test_files_and_directories_mixed_up(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    assert "is a file, not a directory" in refused(capsys, "run", "ddp", "--checkpoint-dir", str(afile))
    assert "is a file, not a directory" in refused(capsys, "run", "ddp", "--checkpoint-dir", str(afile / "sub"))
    assert "is not a directory" in refused(capsys, "sbatch", "--template-dir", str(afile), "--", "x")
    assert "cannot write" in refused(capsys, "sbatch", "--write", str(tmp_path), "--", "x")
    assert "cannot read hostfile" in refused(capsys, *DRY, "--hostfile", str(tmp_path), "--", "x")
    assert "cannot read env file" in refused(capsys, "sbatch", "--env-file", str(tmp_path), "--", "x")


def test_the_examples_module_refuses_a_wrong_root(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    (tmp_path / "proj" / "hostfiles").mkdir(parents=True)
    (tmp_path / "proj" / "slurm").write_text("a file where the examples' folder goes\n")
    for argv, needle in (
        ([str(afile)], f"{str(afile)!r} is not a directory"),
        (["--write", str(tmp_path / "nothing")], "does not exist"),
        (["--write", str(tmp_path / "proj")], "cannot write"),
    ):
        assert examples_main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("python -m hpcdist.jobs.examples: error: ") and needle in err, err


@pytest.mark.parametrize("kind", ["a directory", "not executable", "missing"])
def test_an_mpirun_that_cannot_run(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str) -> None:
    path = {"a directory": tmp_path, "not executable": tmp_path / "text", "missing": tmp_path / "none"}[kind]
    (tmp_path / "text").write_text("hello\n")
    err = refused(capsys, "mpirun", "--dry-run", "--mpirun", str(path), "-np", "2", "--", "x")
    assert f"--mpirun {str(path)!r}" in err


def test_an_executable_that_is_no_program_is_a_usage_error(tmp_path: Path) -> None:
    from hpcdist.launching.spawn import run_mpirun
    from hpcdist.launching.world import World

    fake = tmp_path / "mpirun"
    fake.write_bytes(b"\x7fELF garbage")
    fake.chmod(0o755)
    with pytest.raises(UsageError, match="cannot be started"):
        run_mpirun([str(fake), "-np", "1", "true"], world=World())


@pytest.mark.parametrize(
    "argv",
    [
        (*DRY, "--hostfile", "", "--", "x"),
        (*DRY, "-H", "", "--", "x"),
        (*DRY, "-np", "2", "-x", "", "--", "x"),
        (*DRY, "-np", "2", "--mca", "btl", " ", "--", "x"),
        ("sbatch", "-p", "", "--", "x"),
        ("sbatch", "--env", "", "--", "x"),
        ("sbatch", "--setup", "", "--", "x"),
        ("hostfile", "--hosts", ""),
        ("doctor", "--hostfile", ""),
    ],
)
def test_empty_values_are_refused(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    assert "needs a value, got an empty one" in refused(capsys, *argv)


# Hostfiles as editors and Open MPI write them.
@pytest.mark.parametrize("text", ["\ufeffnode1 slots=2\nnode2 slots=2\n", "node1 slots=2\r\nnode2 slots=2\r\n"])
def test_crlf_and_bom_hostfiles_are_read_and_passed_as_hosts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    path = tmp_path / "hosts"
    path.write_bytes(text.encode("utf-8"))
    status, out, _ = run(capsys, *DRY, "--hostfile", str(path), "--bare", "--", "x")
    assert status == 0 and shlex.split(out)[1:5] == ["-np", "4", "-H", "node1:2,node2:2"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node1 slots = 4\n", (HostSlots("node1", 4),)),
        ("node1 slots =4 max_slots= 6\n", (HostSlots("node1", 4, 6),)),
        ("node1 max_slots=4\n", (HostSlots("node1", 4, 4),)),
        ("node1 count=2 cpu_max=3\n", (HostSlots("node1", 2, 3),)),
    ],
)
def test_open_mpi_hostfile_forms_are_accepted(text: str, expected: tuple[HostSlots, ...]) -> None:
    assert parse_hostfile(text, "hf") == expected


def test_a_host_with_only_max_slots_takes_that_many_ranks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("node1 max_slots=4\n")
    status, out, err = run(capsys, *DRY, "--hostfile", str(tmp_path / "hosts"), "-np", "4", "--bare", "--", "x")
    assert status == 0, err
    assert shlex.split(out)[1:5] == ["-np", "4", "--hostfile", str(tmp_path / "hosts")]


# A program whose first word looks like an option.
@pytest.mark.parametrize(
    "argv",
    [
        (*DRY, "-np", "2", "--", "-x", "FOO"),
        (*DRY, "-np", "2", "--bare", "--", "--oversubscribe"),
        ("torchrun", "--", "--standalone", "t.py"),
        ("sbatch", "--", "-n", "4"),
        ("sbatch", "--launch", "torchrun", "--", "--nnodes", "2"),
    ],
)
def test_a_program_that_starts_with_a_dash(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    assert "starts with '-'" in refused(capsys, *argv)


def test_torchruns_own_dash_m_stays_allowed(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "torchrun", "--", "-m", "pkg.train")
    assert status == 0 and out.rstrip().endswith("-m pkg.train")


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("if true", "syntax error"),
        ("fi", "line"),
        ("cat <<EOF", "here-document"),
        ("echo 'unclosed", "matching"),
    ],
)
def test_a_setup_line_that_breaks_the_script(capsys: pytest.CaptureFixture[str], setup: str, needle: str) -> None:
    err = refused(capsys, "sbatch", "--setup", setup, "--", "x")
    assert "`bash -n` refuses the --setup lines" in err and needle in err


def test_a_broken_script_is_not_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    refused(capsys, "sbatch", "--setup", "done", "--write", str(tmp_path / "job.sbatch"), "--", "x")
    assert not (tmp_path / "job.sbatch").exists()


# Env files and variable names.
def test_env_files_follow_posix_sh_quoting() -> None:
    text = "\ufeffA=x#y\r\nB='a # b' # note\nexport C=\"p\\$q\" D=e\\ f\nE='two\nlines'\nF=$HOME\n"
    assert parse_env_file(text, "f") == [
        ("A", "x#y"),
        ("B", "a # b"),
        ("C", "p$q"),
        ("D", "e f"),
        ("E", "two\nlines"),
        ("F", "$HOME"),
    ]
    for bad, where in (("A=x;y", "f:1"), ("\n\nA=(x)", "f:3"), ("export A", "f:1"), ("A='x\n\n", "f:1")):
        with pytest.raises(UsageError, match=where):
            parse_env_file(bad, "f")


@pytest.mark.parametrize("name", ["UID", "EUID", "PPID", "BASHOPTS", "SHELLOPTS", "BASH_VERSINFO", "RANDOM"])
def test_names_bash_holds_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str) -> None:
    assert "bash sets itself" in refused(capsys, "sbatch", "--env", f"{name}=1", "--", "x")
    (tmp_path / "env").write_text(f"export {name}=1\n")
    assert "bash sets itself" in refused(capsys, "torchrun", "--env-file", str(tmp_path / "env"), "--", "t.py")


@pytest.mark.parametrize("hosts", ["a;b", "a b", "a\x00", "héllo", "a/b", "." * 300, "a@"])
def test_hostfile_hosts_are_host_names(capsys: pytest.CaptureFixture[str], hosts: str) -> None:
    assert refused(capsys, "hostfile", "--hosts", hosts) == (
        f"hpcdist: error: --hosts {hosts!r}: expected host names separated by commas, e.g. node1,node2; {hosts!r} is "
        "not one (letters, digits, '-', '_' and '.', starting with a letter or digit)\n"
    )


def test_a_host_that_looks_like_an_option_is_no_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "hostfile", "--hosts", "-x") == (
        "hpcdist: error: argument --hosts: expected one argument; see `hpcdist hostfile --help`\n"
    )


@pytest.mark.parametrize("gpus", ["abc", "a100:x", "a100:", "0", "-1"])
def test_gpu_counts_must_be_numbers(capsys: pytest.CaptureFixture[str], gpus: str) -> None:
    refusal = refused(capsys, "sbatch", "--gpus-per-node", gpus, "--ntasks-per-node", "2", "--", "x")
    assert refusal == f"hpcdist: error: --gpus-per-node {gpus!r}: {GPUS}\n"


# Launcher values out of range.
@pytest.mark.parametrize(
    ("environ", "needle"),
    [
        (
            {
                "RANK": "1",
                "WORLD_SIZE": "4",
                "LOCAL_RANK": "1",
                "LOCAL_WORLD_SIZE": "2",
                "GROUP_RANK": "2",
                "GROUP_WORLD_SIZE": "2",
            },
            "GROUP_RANK=2 is out of range for GROUP_WORLD_SIZE=2",
        ),
        (
            {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "7"},
            "GROUP_RANK=7 is out of range: 2 ranks run on at most 2 nodes",
        ),
        (OMPI | {"GROUP_RANK": "9"}, "GROUP_RANK=9 is out of range"),
        ({"MASTER_ADDR": "node 1"}, "MASTER_ADDR='node 1' is not a host name"),
        ({"MASTER_ADDR": "n1;reboot"}, "is not a host name"),
        ({"MASTER_PORT": HUGE}, "is not a TCP port"),
        ({"RANK": HUGE, "WORLD_SIZE": "2"}, "more than the 2147483647 ranks"),
        (
            {
                "SLURM_JOB_ID": "1",
                "SLURM_STEP_ID": "0",
                "SLURM_PROCID": "0",
                "SLURM_NTASKS": "2",
                "SLURM_LOCALID": "0",
                "SLURM_NODEID": "0",
                "SLURM_STEP_TASKS_PER_NODE": "2(x99999999999)",
            },
            "lists more than 2147483647 nodes",
        ),
    ],
)
def test_launcher_values_out_of_range(environ: dict[str, str], needle: str) -> None:
    with pytest.raises(UsageError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        LaunchEnv.from_environ(environ)


def test_a_compressed_slurm_count_is_never_expanded() -> None:
    step = {
        "SLURM_JOB_ID": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1999999999",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2000000000)",
    }
    with pytest.raises(UsageError, match="SLURM_NODEID=1999999999 is out of range: 4 ranks"):
        LaunchEnv.from_environ(step)  # walked, not a list of two billion entries


def test_allocation_tasks_per_node_is_bounded_by_the_nodes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "2(x99999999999)")
    assert "lists more than 2 nodes" in refused(capsys, "hostfile")


@pytest.mark.parametrize(
    ("stray", "launcher"),
    [
        ({"WORLD_SIZE": "4"}, "openmpi"),
        ({"RANK": "3"}, "openmpi"),
        ({"LOCAL_RANK": "1"}, "openmpi"),
        ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, "openmpi"),
        ({"TORCHELASTIC_RUN_ID": "x"}, "openmpi"),
    ],
)
def test_a_stray_torch_variable_that_agrees_with_mpiexec(stray: dict[str, str], launcher: str) -> None:
    env = LaunchEnv.from_environ(OMPI | stray)
    assert (env.launcher, env.rank, env.world_size, env.local_rank, env.local_world_size) == (launcher, 3, 4, 1, 2)


@pytest.mark.parametrize(
    ("stray", "needle"),
    [
        ({"WORLD_SIZE": "8"}, "OMPI_COMM_WORLD_SIZE=4 but WORLD_SIZE=8"),
        ({"RANK": "0"}, "OMPI_COMM_WORLD_RANK=3 but RANK=0"),
        ({"LOCAL_WORLD_SIZE": "3"}, "OMPI_COMM_WORLD_LOCAL_SIZE=2 but LOCAL_WORLD_SIZE=3"),
        ({"WORLD_SIZE": "four"}, "WORLD_SIZE='four' is not a non-negative integer"),
    ],
)
def test_a_stray_torch_variable_that_disagrees_is_refused(stray: dict[str, str], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        LaunchEnv.from_environ(OMPI | stray)


def test_hpcdist_env_under_mpiexec_with_a_stray_world_size(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (OMPI | {"WORLD_SIZE": "4"}).items():
        monkeypatch.setenv(name, value)
    status, out, _ = run(capsys, "env")
    assert status == 0 and out.splitlines()[0].split() == ["launcher", "openmpi"]


# Valid input refused until now.
@pytest.mark.parametrize("limit", ["UNLIMITED", "infinite", "-1", "0", "2-24", "1:60"])
def test_slurm_time_forms_are_accepted(capsys: pytest.CaptureFixture[str], limit: str) -> None:
    status, out, err = run(capsys, "sbatch", "-t", limit, "--requeue", "--", "x")
    assert status == 0, err
    assert f"#SBATCH --time={limit}\n" in out


# An unexpected exception is a bug, said as one.
def _boom(args: object) -> int:
    raise RuntimeError("boom")


def test_an_internal_error_says_so_and_exits_70(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcdist.cli import generate

    monkeypatch.setitem(generate.COMMANDS, "hostfile", _boom)
    status, _, err = run(capsys, "hostfile", "--hosts", "a")
    assert status == INTERNAL_ERROR == 70
    assert err.startswith("hpcdist: internal error: RuntimeError: boom\n")
    assert "this is a bug in hpcdist" in err and "HPCDIST_DEBUG=1" in err and "Traceback" not in err
    monkeypatch.setenv("HPCDIST_DEBUG", "1")
    status, _, err = run(capsys, "hostfile", "--hosts", "a")
    assert status == 70 and "Traceback (most recent call last)" in err and 'raise RuntimeError("boom")' in err


def _peer_gone(args: object) -> int:
    import torch.distributed as dist

    raise dist.DistBackendError("connection closed by peer rank 3")


def test_a_failure_torch_distributed_reports_is_the_jobs_not_a_bug(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcdist.cli import generate

    monkeypatch.setitem(generate.COMMANDS, "hostfile", _peer_gone)
    status, _, err = run(capsys, "hostfile", "--hosts", "a")
    assert status == 1
    assert err == "hpcdist: error: DistBackendError: connection closed by peer rank 3\n", err


def _gloo_peer_gone(args: object) -> int:
    import torch.distributed  # noqa: F401 - gloo's errors come with torch.distributed loaded

    raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:4242")


def test_gloos_plain_runtime_error_about_a_lost_peer_is_the_jobs_not_a_bug(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcdist.cli import generate

    monkeypatch.setitem(generate.COMMANDS, "hostfile", _gloo_peer_gone)
    status, _, err = run(capsys, "hostfile", "--hosts", "a")
    assert status == 1 and err.startswith("hpcdist: error: RuntimeError: [../third_party/gloo/"), err


def test_a_timeout_is_an_error_not_a_bug(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcdist.cli import generate

    def late(args: object) -> int:
        raise WaitTimeout("rank 0 waited 5 s for rank 1")

    monkeypatch.setitem(generate.COMMANDS, "hostfile", late)
    assert run(capsys, "hostfile", "--hosts", "a") == (1, "", "hpcdist: error: rank 0 waited 5 s for rank 1\n")


def test_a_closed_output_pipe_ends_quietly(tmp_path: Path) -> None:
    import subprocess

    code = "import sys; from hpcdist.cli import main; sys.exit(main(['sbatch', '--', 'x']))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader goes away before hpcdist writes
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and b"Traceback" not in err and b"internal error" not in err, err


# --include / --exclude: hostile selections are refused by every command that takes them, naming the option.
USE = "use HOST[:SLOT,...] parts joined by '@', e.g. node1@node2:0,2"
NO_SLOT = "of a is not a slot index; give whole numbers from 0, e.g. a:0,2"
EMPTY = f"an empty host between two '@' (or at an end); {USE}"


# (a selection, why it is refused: the message after `OPTION 'VALUE': `; {hosts} is where its slots are numbered)
@pytest.mark.parametrize(
    ("value", "why"),
    [
        *(
            (value, f"{value!r} is not a host name; {USE}")
            for value in ("a;b", "$(id)", "a\nb", "a\x00", "héllo", "a b")
        ),
        ("a@", EMPTY),
        ("@", EMPTY),
        ("a@@b", EMPTY),
        ("a:", "'a:' has no slot after ':'; give slot indices (e.g. a:0,1) or drop ':'"),
        (":0", f"'' is not a host name; {USE}"),
        (f"a:{HUGE}", "a has no slot 100000000000000000000; its 2 slot(s) are numbered 0 to 1 in {hosts}"),
        ("a:1,", f"slot '' {NO_SLOT}"),
        ("a:0x1", f"slot '0x1' {NO_SLOT}"),
        ("a:1_0", f"slot '1_0' {NO_SLOT}"),
        ("a:+1", f"slot '+1' {NO_SLOT}"),
        (
            "n[1-99999999999]",
            "host range 'n[1-99999999999]' is not a valid Slurm nodelist (range too large); e.g. 'node[01-04],gpu7'",
        ),
        ("a,b", f"'a,b' lists several hosts with ','; join hosts with '@' instead ({USE})"),
    ],
)
@pytest.mark.parametrize(
    ("command", "hosts"),
    [
        ((*DRY, "-H", "a:2", "{option}", "{value}", "--", "x"), "-H a:2"),
        (("hostfile", "--hosts", "a", "--slots", "2", "{option}", "{value}"), "--hosts a"),
        (("sbatch", "{option}", "{value}", "--", "x"), ""),
    ],
)
@pytest.mark.parametrize("option", ["--include", "--exclude"])
def test_hostile_selections_are_refused(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...], hosts: str, option: str, value: str, why: str
) -> None:
    argv = [option if word == "{option}" else value if word == "{value}" else word for word in command]
    message = f"hpcdist: error: {option} {value!r}: {why.format(hosts=hosts)}\n"
    if command[0] == "sbatch" and value == f"a:{HUGE}":  # a well-formed slot: Slurm has none to give
        message = (
            f"hpcdist: error: {option} {value!r} selects slots of 'a'; Slurm allocates whole nodes, so name nodes only "
            f"(e.g. {option} a) and pick slots inside the job with `hpcdist mpirun {option} ...`\n"
        )
    assert refused(capsys, *argv) == message


@pytest.mark.parametrize("command", [(*DRY, "-H", "a:2"), ("hostfile", "--hosts", "a"), ("sbatch",)])
@pytest.mark.parametrize("option", ["--include", "--exclude"])
def test_a_selection_that_looks_like_an_option_is_no_value(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...], option: str
) -> None:
    named = "-x/--exclude" if (command[0], option) == ("sbatch", "--exclude") else option
    assert refused(capsys, *command, option, "-x", "--", "x") == (
        f"hpcdist: error: argument {named}: expected one argument; see `hpcdist {command[0]} --help`\n"
    )


def test_an_sbatch_selection_cannot_add_sbatch_lines(capsys: pytest.CaptureFixture[str]) -> None:
    refused(capsys, "sbatch", "--exclude", "n1\n#SBATCH --uid=0", "--", "x")
    status, out, _ = run(capsys, "sbatch", "--exclude", "n[1-2]", "--", "x")
    assert status == 0 and [line for line in out.splitlines() if line.startswith("#SBATCH --ex")] == [
        '#SBATCH --exclude="n[1-2]"'
    ]


@pytest.mark.parametrize("option", ["--include", "--exclude"])
def test_empty_selections_are_refused(capsys: pytest.CaptureFixture[str], option: str) -> None:
    assert "needs a value, got an empty one" in refused(capsys, *DRY, "-H", "a:2", option, "", "--", "x")
