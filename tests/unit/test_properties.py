"""Property tier: generated text, numbers and environments never break hpcdist.

Every subcommand (in-process through `hpcdist.cli.main`, only those that render text: env, mpirun --dry-run,
hostfile, sbatch, torchrun, examples; bench and doctor as far as their options are parsed) and every parser gets
hostile input. The outcome must be success with sane values, or a clear usage error (`hpcdist: error: …`,
exit 2): never a traceback, an internal error, a hang, or a nonsense value taken silently (a zero or negative
count, a rank past the world size). Bounded examples and a deadline keep the tier fast; under CI=true the
examples are derandomized, so a run is reproducible.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, overload
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hpcdist.bench.ddp import ddp_plan_from_options
from hpcdist.bench.plan import MAX_BYTES, parse_size, plan_from_options
from hpcdist.cli import build_parser, main
from hpcdist.cli.diagnose import bench_options
from hpcdist.errors import UsageError
from hpcdist.hosts import HOST_NAME, HostSlots
from hpcdist.jobs.examples import main as examples_main
from hpcdist.jobs.profiles import parse_env_file
from hpcdist.jobs.sbatchspec import gpu_count, parse_signal, parse_time
from hpcdist.launching.hostfile import parse_hostfile, parse_hosts_arg
from hpcdist.launching.names import ENV_NAME
from hpcdist.launching.selection import select_hosts
from hpcdist.runtime.env import LaunchEnv, sources
from hpcdist.schedulers.slurm import expand_nodelist
from hpcdist.values import MAX_COUNT, MAX_SECONDS, slurm_counts

T = TypeVar("T")
CI = os.environ.get("CI") == "true"
SETTINGS = settings(
    max_examples=40,
    deadline=timedelta(seconds=3),  # one example; a whole hang is caught by no_hang below
    derandomize=CI,  # CI: the same examples every run
    database=None,  # no example database (hypothesis caches constants in the git-ignored .hypothesis/)
    suppress_health_check=[HealthCheck.too_slow],
)
FAST = settings(SETTINGS, max_examples=150, deadline=timedelta(seconds=1))


class Hang(BaseException):
    """An example did not finish in time (a BaseException, so no `except Exception` in hpcdist can hide it)."""


@contextlib.contextmanager
def no_hang(seconds: float = 10.0) -> Iterator[None]:
    """Fail with Hang when the body takes longer than `seconds`; pytest-timeout's own alarm is put back after."""

    def alarm(signum: int, frame: object) -> None:
        raise Hang(f"no answer within {seconds} s")

    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, alarm)
    pending, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if pending:
            signal.setitimer(signal.ITIMER_REAL, max(pending - (time.monotonic() - started), 0.001))


def cli(argv: list[str], environ: dict[str, str] | None = None, answers: tuple[int, ...] = (0,)) -> tuple[int, str]:
    """main(argv) in a clean environment -> (status, stdout): one of `answers`, or 2 with a clear usage error."""
    out, err = io.StringIO(), io.StringIO()
    clean = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")}
    settable = {k: settable_value(v) for k, v in (environ or {}).items()}
    with (
        mock.patch.dict(os.environ, {**clean, "HPCDIST_DEBUG": "1", **settable}, clear=True),
        no_hang(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        status = main(argv)
    message = err.getvalue()
    assert status in (*answers, 2) and "Traceback" not in message, f"exit {status} for {argv!r}:\n{message}"
    event(f"exit {status}")  # --hypothesis-show-statistics: how often each command got through
    errors = [line for line in message.splitlines() if line.startswith("hpcdist: error: ")]
    assert len(errors) == (status == 2), f"exit {status} says {len(errors)} errors:\n{message}"
    return status, out.getvalue()


def settable_value(value: str) -> str:
    """`value` as an environment variable can hold it: no NUL, and only the surrogates that stand for bytes."""
    return "".join(
        "?" if c == "\x00" or ("\ud800" <= c <= "\udfff" and not "\udc80" <= c <= "\udcff") else c for c in value
    )


def clear(parse: Callable[..., T], *args: Any) -> T | None:
    """parse(*args), or None when it refuses with a UsageError; any other exception fails the test."""
    with no_hang():
        try:
            return parse(*args)
        except UsageError as exc:
            assert str(exc).strip(), "an error says what is wrong"
            return None


# Text that breaks parsers: separators, quotes, shell syntax, control and non-ASCII characters, surrogates.
FRAGMENTS = [
    "",
    " ",
    "\t",
    "-",
    "--",
    "-x",
    "-m",
    "=",
    " = ",
    ":",
    ",",
    "#",
    "'",
    '"',
    "\\",
    "\n",
    "\r\n",
    "\r",
    "\x00",
    "\ufeff",
    "\udcff",
    "é",
    "中",
    "²",
    "١٢",
    "$HOME",
    "`id`",
    "$(id)",
    ";",
    "&",
    "|",
    "<",
    "(",
    ")",
    "[",
    "]",
    "{{",
    "}}",
    "{%",
    "a b",
    "node1",
    "node[01-04]",
    "n[1-99999999999]",
    "2(x3)",
    "2(x99999999999)",
    "slots=",
    "max_slots=",
    "UID",
    "PATH",
    "export ",
    "USR1@",
    "UNLIMITED",
    "inf",
    "nan",
    "1e300",
    "0x10",
    "1_0",
    "+5",
]
NUMBERS = st.one_of(
    st.integers(-(10**3), 10**3).map(str),
    st.integers(-(2**64), 2**64).map(str),
    st.integers(0, 40).map(lambda n: "9" * (n * 120)),  # up to 4800 digits: past Python's int-to-str limit
    st.sampled_from(["0", "-0", "00", " 7 ", "²", "١٢", "1_000", "+5", "1e3", "0x1f", "inf", "nan", "1.5", ""]),
)
TEXT = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.lists(st.sampled_from(FRAGMENTS) | NUMBERS, max_size=5).map("".join),
    st.text(st.characters(), max_size=12),
)
VALUE = st.one_of(NUMBERS, TEXT)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch directory: a file, an empty directory and a missing path to point options at."""
    root = tmp_path_factory.mktemp("properties")
    (root / "file").write_text("node1 slots=2\n")
    (root / "dir").mkdir()
    return root


def write(workdir: Path, name: str, data: str) -> str:
    """`data` in a file of the scratch directory (bytes as given, surrogates too); its path."""
    path = workdir / name
    path.write_bytes(data.encode("utf-8", "surrogatepass"))  # lone surrogates become bytes that are not UTF-8
    return str(path)


def _words(name: str) -> Callable[[str], list[str]]:
    """The words of option `name` given a generated value: the name alone for FLAG."""
    return lambda v: [name] if v == "\0flag" else [name, v]


def options(table: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[list[str]]:
    """A few of the options in `table`, each with a generated value (FLAG: an option without one)."""
    return st.lists(st.sampled_from(sorted(table)), max_size=5, unique=True).flatmap(
        lambda names: st.tuples(*(table[n].map(_words(n)) for n in names)).map(
            lambda parts: [word for part in parts for word in part]
        )
    )


@overload
def mostly(good: st.SearchStrategy[str]) -> st.SearchStrategy[str]: ...
@overload
def mostly(good: st.SearchStrategy[T], bad: st.SearchStrategy[T]) -> st.SearchStrategy[T]: ...
def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any] = VALUE) -> st.SearchStrategy[Any]:
    """A valid value two times in three, else a hostile one, so examples get past the first check."""
    return st.one_of(good, good, bad)


FLAG = st.just("\0flag")
COUNT = mostly(st.integers(1, 8).map(str), NUMBERS)
HOST = st.sampled_from(["node1", "n2", "10.0.0.1", "gpu-7.cluster", "user@n3"])
NAME = st.sampled_from(["NCCL_DEBUG", "OMP_NUM_THREADS", "X", "_y1", "UID", "SHELLOPTS", "RANDOM"])
ASSIGNMENT = mostly(st.tuples(NAME, TEXT).map("=".join), st.tuples(TEXT, TEXT).map("=".join))
PROGRAM = st.lists(st.one_of(st.sampled_from(["python", "train.py", "-m", "-x", "--lr", "pkg.mod"]), TEXT), max_size=4)
GOOD_PROGRAM = st.tuples(st.sampled_from([["python", "train.py"], ["train.py"], ["./a.out"]]), PROGRAM).map(
    lambda parts: parts[0] + parts[1]
)


# `hpcdist mpirun --dry-run`
MPIRUN = {
    "-H": mostly(st.lists(st.tuples(HOST, COUNT).map(":".join), min_size=1, max_size=3).map(",".join)),
    "-x": ASSIGNMENT,
    "--bind-to": mostly(st.sampled_from(["none", "core"])),
    "--map-by": mostly(st.just("slot")),
    "--oversubscribe": FLAG,
    "--bare": FLAG,
    "--probe-fabrics": FLAG,
}
HOSTFILE = st.lists(
    mostly(st.tuples(HOST, st.sampled_from([" slots=", ":", " max_slots=", " slots = "]), COUNT).map("".join), TEXT),
    max_size=4,
).map("\n".join)


@SETTINGS
@given(
    argv=options(MPIRUN),
    np=st.none() | COUNT,
    program=mostly(GOOD_PROGRAM, PROGRAM),
    hostfile=st.none() | st.none() | HOSTFILE,
    mca=st.none() | st.tuples(mostly(st.just("pml")), mostly(st.sampled_from(["ob1", "^openib"]))),
)
def test_mpirun_dry_run(
    workdir: Path,
    argv: list[str],
    np: str | None,
    program: list[str],
    hostfile: str | None,
    mca: tuple[str, str] | None,
) -> None:
    extra = ["--hostfile", write(workdir, "hosts", hostfile)] if hostfile is not None else []
    extra += ["-np", np] if np is not None else []
    extra += ["--mca", *mca] if mca else []
    status, out = cli(["mpirun", "--dry-run", "--mpirun", "mpirun", *argv, *extra, "--", *program])
    if status == 0:
        words = shlex.split(out)
        assert 1 <= int(words[words.index("-np") + 1]) <= MAX_COUNT
        if "-H" in words[: words.index("--bind-to")]:
            for item in words[words.index("-H") + 1].split(","):
                host, _, slots = item.rpartition(":")
                assert HOST_NAME.match(host) and 1 <= int(slots) <= MAX_COUNT, item
        assert program and not program[0].startswith("-")


# `hpcdist hostfile`, from --hosts, --nodelist or a generated allocation
@SETTINGS
@given(
    source=st.one_of(
        st.tuples(st.just("--hosts"), mostly(st.lists(HOST, min_size=1, max_size=3, unique=True).map(",".join))),
        st.tuples(st.just("--nodelist"), mostly(st.sampled_from(["n[1-3]", "gpu[01-02],cpu7", "a"]))),
        st.just(()),  # the allocation's, from the generated SLURM_* below
    ),
    argv=options({"--slots": COUNT, "--format": mostly(st.sampled_from(["openmpi", "mpich"]))}),
    nodelist=st.none() | mostly(st.just("n[1-2]")),
    tasks=st.none() | mostly(st.sampled_from(["2(x2)", "4,1"])),
)
def test_hostfile(source: tuple[str, ...], argv: list[str], nodelist: str | None, tasks: str | None) -> None:
    environ = {k: v for k, v in (("SLURM_JOB_NODELIST", nodelist), ("SLURM_TASKS_PER_NODE", tasks)) if v is not None}
    status, out = cli(["hostfile", *source, *argv], environ)
    if status == 0:
        body = "".join(line + "\n" for line in out.splitlines() if not line.startswith("#"))
        hosts = parse_hostfile(body, "out")
        assert hosts and all(HOST_NAME.match(h.host) and 1 <= h.slots <= MAX_COUNT for h in hosts)


# `hpcdist sbatch` (never --submit) and `hpcdist torchrun`
SBATCH = {
    "--nodes": COUNT,
    "--ntasks-per-node": COUNT,
    "--gpus-per-node": mostly(st.sampled_from(["8", "a100:4"])),
    "--cpus-per-task": COUNT,
    "--mem": mostly(st.sampled_from(["16G", "0"])),
    "--time": mostly(st.sampled_from(["30", "1-00:00", "UNLIMITED", "4:00:00"])),
    "--partition": TEXT,
    "--account": TEXT,
    "--nodelist": mostly(st.just("n[1-2]")),
    "--job-name": TEXT,
    "--output": TEXT,
    "--exclusive": FLAG,
    "--launch": mostly(st.sampled_from(["srun", "mpirun", "torchrun"])),
    "--setup": TEXT,
    "--python": TEXT,
    "--master-addr": mostly(HOST),
    "--master-port": COUNT,
    "--requeue": FLAG,
    "--requeue-signal": mostly(st.sampled_from(["USR1@90", "TERM@30"])),
    "--env": ASSIGNMENT,
    "--nccl-socket-ifname": TEXT,
    "--profile": mostly(st.sampled_from(["nccl", "gloo"])),
    "--opal-prefix": FLAG,
}
ENV_FILE = st.lists(mostly(st.tuples(st.sampled_from(["", "export "]), ASSIGNMENT).map("".join), TEXT), max_size=4).map(
    "\n".join
)


@SETTINGS
@given(
    argv=options(SBATCH), program=mostly(GOOD_PROGRAM, PROGRAM), env_file=st.none() | ENV_FILE, to_file=st.booleans()
)
def test_sbatch(workdir: Path, argv: list[str], program: list[str], env_file: str | None, to_file: bool) -> None:
    extra = ["--env-file", write(workdir, "env", env_file)] if env_file is not None else []
    target = workdir / "job.sbatch"
    target.unlink(missing_ok=True)
    extra += ["--write", str(target)] if to_file else []
    status, out = cli(["sbatch", *argv, *extra, "--", *program])
    script = target.read_text(encoding="utf-8") if to_file and status == 0 else out
    assert (status == 0) == bool(script), "a script exactly when it succeeds"
    if status == 0:
        for name in ("nodes", "ntasks-per-node", "cpus-per-task"):
            for value in re.findall(rf"^#SBATCH --{name}=(.*)$", script, re.MULTILINE):
                assert 1 <= int(value) <= MAX_COUNT
        exports = "".join(line + "\n" for line in script.splitlines() if line.startswith("export "))
        done = subprocess.run(["bash", "-ec", exports], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and not done.stderr, f"bash refuses the script's exports:\n{done.stderr}"


TORCHRUN = {
    "--nproc-per-node": mostly(st.sampled_from(["4", "gpu", "auto"])),
    "--nnodes": COUNT,
    "--node-rank": mostly(st.integers(0, 3).map(str), NUMBERS),
    "--master-addr": mostly(HOST),
    "--master-port": COUNT,
    "--torchrun": TEXT,
    "--script": FLAG,
    "--env": ASSIGNMENT,
    "--profile": mostly(st.sampled_from(["nccl", "gloo"])),
}


@SETTINGS
@given(argv=options(TORCHRUN), program=mostly(GOOD_PROGRAM, PROGRAM))
def test_torchrun(argv: list[str], program: list[str]) -> None:
    status, out = cli(["torchrun", *argv, "--", *program])
    if status == 0 and "--script" not in argv:
        words = shlex.split(out)  # torchrun's options come before the program's: the first of each is its
        nnodes = int(next(w for w in words if w.startswith("--nnodes=")).partition("=")[2])
        node_rank = int(next((w for w in words if w.startswith("--node_rank=")), "=0").partition("=")[2])
        assert 1 <= nnodes <= MAX_COUNT and 0 <= node_rank < nnodes


def _examples(*argv: str) -> tuple[int, str, str]:
    """`python -m hpcdist.jobs.examples ARGV` in-process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with no_hang(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = examples_main(list(argv))
    return status, out.getvalue(), err.getvalue()


# `python -m hpcdist.jobs.examples`, pointed at files and missing paths: refused alike, checking or writing
@pytest.mark.parametrize("write_them", [False, True])
@pytest.mark.parametrize(("root", "what"), [("file", "is not a directory"), ("missing", "does not exist"),
                                            ("file/below", "does not exist"), ("", "does not exist")])  # fmt: skip
def test_examples_outside_a_directory_are_refused(tmp_path: Path, root: str, what: str, write_them: bool) -> None:
    (tmp_path / "file").write_text("node1 slots=2\n")
    path = str(tmp_path / root) if root else ""
    status, out, err = _examples(*(["--write"] if write_them else []), path)
    assert (status, out) == (2, "")
    assert err == (
        f"python -m hpcdist.jobs.examples: error: {path!r} {what}; give the project directory (the one holding "
        "hostfiles/ and slurm/)\n"
    )


def test_examples_in_an_empty_directory_are_missing_until_written(tmp_path: Path) -> None:
    status, _, err = _examples(str(tmp_path))
    assert status == 1 and "python -m hpcdist.jobs.examples: hostfiles/localhost is missing\n" in err, err
    status, out, err = _examples("--write", str(tmp_path))
    assert (status, err) == (0, "") and "wrote hostfiles/localhost\n" in out, out
    assert _examples(str(tmp_path)) == (0, "", "")  # in sync now


# `hpcdist env` and LaunchEnv.from_environ with generated launcher environments
LAUNCH_VARS = sorted(
    {v for s in sources() for v in s.variables}
    | {
        "MASTER_ADDR",
        "MASTER_PORT",
        "SLURM_STEP_ID",
        "SLURM_STEPID",
        "SLURM_JOB_ID",
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "GROUP_WORLD_SIZE",
        "SLURM_STEP_NUM_NODES",
        "FLUX_JOB_NNODES",
        "PMI_LOCAL_SIZE",
    }
)
SMALL = st.integers(0, 5).map(str)
ENVIRON = st.dictionaries(st.sampled_from(LAUNCH_VARS), st.one_of(SMALL, SMALL, NUMBERS, TEXT), max_size=4)


def one_rank_per_node(launcher: str, size: int, rank: int) -> dict[str, str]:
    """A complete, consistent environment of `launcher` for `rank` of `size`, one rank per node."""
    source = next(s for s in sources() if s.launcher == launcher)
    env = {source.rank: str(rank), source.world_size[0]: str(size)}
    if source.local_rank and source.local_world_size:
        env |= {source.local_rank: "0", source.local_world_size[0]: "1"}
    if launcher == "pals":  # Cray's PMI sets its rank beside PMI_SIZE
        env |= {"PMI_RANK": str(rank)}
    if launcher == "flux":  # no local size: one task per node is FLUX_JOB_SIZE tasks on as many nodes
        env |= {"FLUX_TASK_LOCAL_ID": "0", "FLUX_JOB_NNODES": str(size)}
    if launcher == "slurm":
        env |= {"SLURM_STEP_ID": "0", "SLURM_NODEID": str(rank), source.local_world_size[0]: f"1(x{size})"}
    return env


CONSISTENT = st.tuples(
    st.sampled_from([s.launcher for s in sources() if s.world_size]), st.integers(1, 6), st.integers(0, 5)
).map(lambda t: one_rank_per_node(t[0], t[1], t[2] % t[1]))


def check_launch(env: LaunchEnv | None) -> None:
    """The invariants of a detected launch."""
    if env is None:
        return
    assert 0 <= env.rank < env.world_size <= MAX_COUNT
    assert 0 <= env.local_rank < env.local_world_size <= env.world_size
    assert env.node_rank is None or 0 <= env.node_rank < env.world_size
    assert env.master_port is None or 1 <= env.master_port <= 65535
    assert env.master_addr is None or env.master_addr.strip() == env.master_addr != ""


@FAST
@given(environ=ENVIRON, base=st.none() | CONSISTENT)
def test_launch_env_from_generated_environments(environ: dict[str, str], base: dict[str, str] | None) -> None:
    env = clear(LaunchEnv.from_environ, {**(base or {}), **environ})
    event("detected" if env else "refused")
    check_launch(env)
    if base and not environ:
        assert env is not None, "a complete, consistent launcher environment is accepted"


@SETTINGS
@given(environ=ENVIRON, base=st.none() | CONSISTENT, as_json=st.booleans())
def test_env_command(environ: dict[str, str], base: dict[str, str] | None, as_json: bool) -> None:
    cli(["env", *(["--json"] if as_json else [])], {**(base or {}), **environ})


# bench and doctor: option parsing only (running them would start a job)
BENCH = {
    "-b": VALUE,
    "-e": VALUE,
    "-f": NUMBERS,
    "-i": VALUE,
    "-n": NUMBERS,
    "-w": NUMBERS,
    "--rounds": NUMBERS,
    "-c": NUMBERS,
    "-d": VALUE,
    "-o": VALUE,
    "-r": NUMBERS,
    "--backend": VALUE,
    "--timeout": VALUE,
    "--reference": FLAG,
    "--json": FLAG,
}


def parsed(argv: list[str]) -> Any:
    """build_parser().parse_args(argv), or None when it refuses with a UsageError."""
    return clear(build_parser().parse_args, argv)


@SETTINGS
@given(collective=st.sampled_from(["all_reduce", "broadcast", "alltoall", "ddp"]), argv=options(BENCH))
def test_bench_options(collective: str, argv: list[str]) -> None:
    args = parsed(["bench", collective, *argv])
    if args is None:
        return
    assert args.timeout is None or 0 < args.timeout <= MAX_SECONDS
    if collective == "ddp":
        plan = clear(ddp_plan_from_options, bench_options(args))
        assert plan is None or (1 <= plan.iters <= MAX_COUNT and 0 <= plan.warmup <= MAX_COUNT)
        return
    bench = clear(plan_from_options, bench_options(args))
    if bench is not None:
        assert bench.sizes and all(0 <= s <= MAX_BYTES for s in bench.sizes) and 1 <= bench.iters <= MAX_COUNT
        assert 1 <= bench.rounds <= bench.iters and bench.check >= 0


@SETTINGS
@given(argv=options({"--hostfile": VALUE, "--mpirun": VALUE, "--timeout": VALUE, "--json": FLAG}))
def test_doctor_options(argv: list[str]) -> None:
    args = parsed(["doctor", *argv])
    assert args is None or (0 < args.timeout <= MAX_SECONDS and args.hostfile != "" and args.mpirun != "")


# The parsers themselves
LINES = st.lists(
    st.one_of(
        st.sampled_from(["node1", "node1 slots=2", "node1:2", "n2 max_slots=3", "n3 slots = 4", "# c", ""]),
        TEXT,
    ),
    max_size=6,
).map("\n".join)


@FAST
@given(text=LINES)
def test_hostfile_text(text: str) -> None:
    hosts = clear(parse_hostfile, text, "hf")
    for h in hosts or ():
        assert HOST_NAME.match(h.host) and 1 <= h.slots <= MAX_COUNT
        assert h.max_slots is None or h.slots <= h.max_slots <= MAX_COUNT


@FAST
@given(value=VALUE)
def test_dash_h_lists(value: str) -> None:
    for h in clear(parse_hosts_arg, value) or ():
        assert HOST_NAME.match(h.host) and h.slots >= 1


@FAST
@given(
    text=st.lists(
        st.one_of(st.sampled_from(["A=1", "export B='x y'", 'C="a\\$b"', "D=x#y # c"]), TEXT), max_size=5
    ).map("\n".join)
)
def test_env_files(text: str) -> None:
    for name, value in clear(parse_env_file, text, "env") or ():
        assert ENV_NAME.match(name) and isinstance(value, str)


@FAST
@given(value=VALUE)
def test_nodelists(value: str) -> None:
    hosts = clear(expand_nodelist, value)
    assert hosts is None or (hosts and all(HOST_NAME.match(h) for h in hosts))


@FAST
@given(value=st.one_of(VALUE, st.tuples(NUMBERS, st.sampled_from(["-", ":", ""]), NUMBERS).map("".join)))
def test_times(value: str) -> None:
    seconds = clear(parse_time, value)
    assert seconds is None or 0 < seconds < 2**31


@FAST
@given(value=st.one_of(VALUE, st.tuples(st.sampled_from(["USR1", "sigterm", "KILL", ""]), NUMBERS).map("@".join)))
def test_signals(value: str) -> None:
    signal_lead = clear(parse_signal, value)
    assert signal_lead is None or 0 < signal_lead[1] <= 65535


@FAST
@given(value=VALUE, counts=st.none() | VALUE)
def test_gpus_sizes_and_slurm_counts(value: str, counts: str | None) -> None:
    gpus = clear(gpu_count, value)
    assert gpus is None or 1 <= gpus <= MAX_COUNT
    size = clear(parse_size, value, "-b")
    assert size is None or 0 <= size <= MAX_BYTES
    runs = clear(slurm_counts, counts or value, "SLURM_TASKS_PER_NODE", 100)
    assert runs is None or sum(repeat for _, repeat in runs) <= 100


# --include / --exclude (DeepSpeed's host@host:slot,slot) over generated host lists, and through the CLI
SELECT_HOST = st.sampled_from(["n1", "n2", "gpu-7.cluster", "10.0.0.1", "a_b"])
SELECT_HOSTS = st.lists(
    st.tuples(SELECT_HOST, st.integers(1, 4)), min_size=1, max_size=4, unique_by=lambda pair: pair[0]
).map(lambda pairs: tuple(HostSlots(*p) for p in pairs))
SLOTS = st.lists(st.integers(0, 5).map(str), min_size=1, max_size=3).map(",".join)
PART = st.one_of(SELECT_HOST, st.sampled_from(["n[1-2]", "nope"]), st.tuples(SELECT_HOST, SLOTS).map(":".join))
SELECTION = mostly(st.lists(PART, min_size=1, max_size=3).map("@".join), TEXT)


@FAST
@given(hosts=SELECT_HOSTS, text=SELECTION)
def test_include_and_exclude_split_the_slots_between_them(hosts: tuple[HostSlots, ...], text: str) -> None:
    included = clear(select_hosts, hosts, text, None, "hosts")
    excluded = clear(select_hosts, hosts, None, text, "hosts")
    order = [h.host for h in hosts]
    slots = {h.host: h.slots for h in hosts}
    kept: dict[str, list[set[int]]] = {h.host: [] for h in hosts}
    for result in (included, excluded):
        names = [s.host.host for s in result or ()]
        assert names == [n for n in order if n in names], "hosts keep the host list's order"
        for s in result or ():
            indices = set(range(slots[s.host.host])) if s.indices is None else set(s.indices)
            assert s.indices is None or (list(s.indices) == sorted(indices) and s.host.slots == len(indices))
            assert indices and indices <= set(range(slots[s.host.host]))
            kept[s.host.host].append(indices)
    if included is None:
        assert excluded is None, "whatever --include refuses, --exclude refuses too"
    elif excluded is None:  # it excluded every slot: so --include keeps every slot
        assert all(s.indices is None for s in included) and len(included) == len(hosts)
    else:
        for host, sets in kept.items():
            assert set().union(*sets) == set(range(slots[host])) and sum(map(len, sets)) == slots[host], host


@SETTINGS
@given(hosts=SELECT_HOSTS, text=SELECTION, include=st.booleans(), np=st.none() | COUNT)
def test_mpirun_dry_run_with_a_selection(
    hosts: tuple[HostSlots, ...], text: str, include: bool, np: str | None
) -> None:
    listed = ",".join(f"{h.host}:{h.slots}" for h in hosts)
    status, out = cli(
        [
            "mpirun",
            "--dry-run",
            "--mpirun",
            "mpirun",
            "-H",
            listed,
            "--include" if include else "--exclude",
            text,
            *(["-np", np] if np else []),
            "--",
            "prog",
        ]
    )
    if status == 0:
        words = shlex.split(out)
        ranks = [int(words[i + 1]) for i, w in enumerate(words) if w == "-np"]
        assert ranks and all(n >= 1 for n in ranks) and (not np or sum(ranks) == int(np))  # '' passes no -np
        devices = [w.partition("=")[2] for w in words if w.startswith("CUDA_VISIBLE_DEVICES=")]
        assert all(re.fullmatch(r"[0-3](,[0-3])*", d) for d in devices)


@SETTINGS
@given(text=SELECTION, include=st.booleans(), nodelist=st.none() | mostly(st.just("n[1-2]")), nodes=st.none() | COUNT)
def test_sbatch_with_a_selection(text: str, include: bool, nodelist: str | None, nodes: str | None) -> None:
    status, out = cli(
        [
            "sbatch",
            "--include" if include else "--exclude",
            text,
            *(["--nodelist", nodelist] if nodelist else []),
            *(["-N", nodes] if nodes else []),
            "--",
            "prog",
        ]
    )
    if status == 0:
        lines = [line for line in out.splitlines() if line.startswith(("#SBATCH --nodelist", "#SBATCH --exclude"))]
        assert len(lines) == 1 and ":" not in lines[0], "one whole-node option"
