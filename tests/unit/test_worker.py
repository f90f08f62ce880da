"""How the per-rank shim decides to run a program in-process (Python) or as a child."""

from __future__ import annotations

import os

import pytest

from hpcdist.contract import RankContract
from hpcdist.errors import UsageError
from hpcdist.program import PythonTarget
from hpcdist.runtime.process import RankProcess
from hpcdist.worker import python_target


def _nothing(name: str) -> None:
    return None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "train.py", "--backend", "gloo"], PythonTarget("path", "train.py", ("--backend", "gloo"))),
        (["python3", "-u", "main.py"], PythonTarget("path", "main.py", ())),
        (["/usr/bin/python3.11", "-X", "dev", "-W", "ignore", "a.py"], PythonTarget("path", "a.py", ())),
        (["python", "-Wignore", "-m", "pkg.mod", "-x"], PythonTarget("module", "pkg.mod", ("-x",))),
        (["python", "-c", "print(1)", "a"], PythonTarget("code", "print(1)", ("a",))),
        (["hostname"], None),
    ],
)
def test_python_target(argv: list[str], expected: PythonTarget | None) -> None:
    assert python_target(argv, which=_nothing) == expected


def test_console_scripts_with_a_python_shebang_run_in_process(tmp_path) -> None:
    script = tmp_path / "hpcdist"
    script.write_text("#!/venv/bin/python3\nimport sys\n")
    shell = tmp_path / "job.sh"
    shell.write_text("#!/bin/sh\necho hi\n")
    which = {"hpcdist": str(script), "job.sh": str(shell)}.get
    assert python_target(["hpcdist", "run", "p2p"], which=which) == PythonTarget("path", str(script), ("run", "p2p"))
    assert python_target(["job.sh"], which=which) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no program given"),
        (["python"], "names no script, module or code"),
        (["python", "-m"], "-m needs an argument"),
        (["python", "-i", "a.py"], "python option -i is not supported per rank"),
    ],
)
def test_python_target_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        python_target(argv, which=_nothing)


@pytest.mark.parametrize(
    ("code", "status"),
    [(None, 0), (0, 0), (3, 3), (-1, 255), (-100, 156), (255, 255), (256, 0), (True, 1), ("bye", 1)],
)
def test_an_in_process_exit_status_is_what_the_os_makes_of_it(code: object, status: int) -> None:
    from hpcdist.worker import _exit_code

    assert _exit_code(code) == status


@pytest.mark.parametrize("code", [-1, -100])
def test_a_negative_sys_exit_in_process_is_an_exit_code_not_a_signal(code: int, monkeypatch) -> None:
    from hpcdist.worker import _describe, _run_in_process

    monkeypatch.setattr("sys.argv", ["shim"])
    status, failed = _run_in_process(
        RankProcess(RankContract()), PythonTarget("code", f"import sys; sys.exit({code})", ()), 0
    )
    assert status == code & 0xFF and _describe(status) == f"exit code {code & 0xFF}" and failed is None


@pytest.mark.parametrize(
    ("error", "after_peer"),
    [
        ("[/x/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:64672. This is typically", True),
        ("[/x/gloo/transport/tcp/unbound_buffer.cc:81] Connection reset by peer", True),
        ("NCCL error: remote process exited or there was a network error", True),
        ("[/x/gloo/transport/tcp/pair.cc:598] Write error [127.0.0.1]:23: Broken pipe", True),
        ("CUDA out of memory", False),
    ],
)
def test_an_error_that_says_a_peer_went_first_is_told_apart(error: str, after_peer: bool, monkeypatch, capsys) -> None:
    from hpcdist.worker import _run_in_process

    monkeypatch.setattr("sys.argv", ["shim"])
    status, failed = _run_in_process(
        RankProcess(RankContract()), PythonTarget("code", f"raise RuntimeError({error!r})", ()), 0
    )
    assert status == 1 and failed is not None and failed.after_peer == after_peer
    assert failed.call == "" and failed.at is not None  # no call: it raised outside any
    # under a launcher not hpcdist mpirun, a rank that failed because a peer went is told by its ending's one line
    assert (f"[rank 0] RuntimeError: {error}" in capsys.readouterr().err) is not after_peer
    monkeypatch.setenv("HPCDIST_DEBUG", "1")  # everything, its traceback too
    _run_in_process(RankProcess(RankContract()), PythonTarget("code", f"raise RuntimeError({error!r})", ()), 0)
    assert f"[rank 0] RuntimeError: {error}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (3, "exit code 3"),
        (-9, "killed by SIGKILL"),
        (-1, "killed by SIGHUP"),
        (-40, "killed by signal 40"),
        (-100, "killed by signal 100"),
    ],
)
def test_a_childs_status_is_described_without_crashing_on_unknown_signals(code: int, text: str) -> None:
    from hpcdist.worker import _describe

    assert _describe(code) == text


def test_a_child_that_cannot_start_is_a_usage_error_naming_it(tmp_path, monkeypatch, capsys) -> None:
    from hpcdist.worker import _run_child

    script = tmp_path / "job"
    script.write_text("#!/no/such/interpreter\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    aborts: list[int] = []
    monkeypatch.setattr("hpcdist.worker.abort_job", aborts.append)  # MPI may be initialised in this process
    for program, message in [
        ("/no/such-binary", "program '/no/such-binary' does not exist; check the path"),
        ("no-such-binary", "program 'no-such-binary' not found on PATH; check the name"),
        (str(script), f"program '{script}' names an interpreter on its #! line that does not exist"),
        (str(tmp_path), f"program '{tmp_path}' is not executable"),
    ]:
        assert _run_child(RankProcess(RankContract()), [program], {}, 3) == 2 and aborts.pop() == 2  # the job ends, 2
        err = capsys.readouterr().err
        assert err.startswith("hpcdist: error: rank 3 on ") and message in err and "Traceback" not in err


def test_a_failing_rank_waits_until_its_launcher_has_read_its_output(capfd: pytest.CaptureFixture[str]) -> None:
    """abort's wait returns once the pipe's reader has taken every byte, and not before."""
    import threading
    import time

    from hpcdist.abort import wait_until_read

    read_end, write_end = os.pipe()
    os.write(write_end, b"last words\n")
    taken: list[float] = []

    def reader() -> None:
        time.sleep(0.3)  # the behaviour under test: a reader late to read
        taken.append(time.monotonic())
        os.read(read_end, 100)

    thread = threading.Thread(target=reader)
    thread.start()
    wait_until_read((write_end,), timeout=10)
    returned = time.monotonic()
    thread.join()
    os.close(read_end)
    os.close(write_end)
    assert taken and returned >= taken[0]
    assert "warning" not in capfd.readouterr().err


def test_a_failing_rank_stops_waiting_for_a_reader_that_never_reads(capfd: pytest.CaptureFixture[str]) -> None:
    """A stuck reader costs the timeout, and the warning says who waited for what."""
    from hpcdist.abort import wait_until_read

    read_end, write_end = os.pipe()
    os.write(write_end, b"unread\n")
    wait_until_read((write_end,), timeout=0.2)
    os.close(read_end)
    os.close(write_end)
    err = capfd.readouterr().err
    assert f"the failing rank waited 0.2 s for its launcher to read its output (fds {write_end})" in err


_PROBE = """\
import json, pickle, sys
class Thing:
    pass
def typed(x: int) -> None:
    pass
import __main__
print(json.dumps({
    "name": __name__, "file": globals().get("__file__"), "package": __package__, "argv": sys.argv,
    "annotation": repr(typed.__annotations__["x"]), "main": __main__.Thing is Thing,
    "pickles": type(pickle.loads(pickle.dumps(Thing()))) is Thing,
}))
"""


@pytest.mark.parametrize("kind", ["source", "compiled", "zipapp", "code"])
def test_a_python_program_runs_in_process_as_python_runs_it(kind: str, tmp_path, monkeypatch, capsys) -> None:
    """A script, a compiled script, a zip application and -c code see what they see under python itself: their
    name, file, package and argv, their annotations evaluated (not the shim's `from __future__`), `__main__`."""
    import json
    import py_compile
    import subprocess
    import sys
    import zipapp

    from hpcdist.worker import _run_in_process

    script = tmp_path / "probe.py"
    script.write_text(_PROBE)
    if kind == "compiled":
        path = str(tmp_path / "probe.pyc")
        py_compile.compile(str(script), cfile=path, doraise=True)
    elif kind == "zipapp":
        (tmp_path / "app").mkdir()
        (tmp_path / "app" / "__main__.py").write_text(_PROBE)
        path = str(tmp_path / "app.pyz")
        zipapp.create_archive(tmp_path / "app", path)
    else:
        path = str(script)
    words = ["-c", _PROBE] if kind == "code" else [path]
    expected = json.loads(subprocess.run([sys.executable, *words, "a"], capture_output=True, text=True).stdout)
    target = PythonTarget("code", _PROBE, ("a",)) if kind == "code" else PythonTarget("path", path, ("a",))
    monkeypatch.setattr("sys.argv", ["shim"])
    monkeypatch.setattr("sys.path", list(sys.path))
    assert _run_in_process(RankProcess(RankContract()), target, 0) == (0, None)
    seen = json.loads(capsys.readouterr().out)
    if kind == "compiled":  # run by runpy.run_path, whose __package__ is '' where python's is None
        assert seen.pop("package") == "" and expected.pop("package") is None
    assert seen == expected and seen["annotation"] == "<class 'int'>" and seen["main"] and seen["pickles"]


def test_a_script_runs_without_loading_pkgutil(tmp_path) -> None:
    """runpy.run_path imports pkgutil (2 ms of a rank's start); a source script runs without it."""
    import subprocess
    import sys

    script = tmp_path / "probe.py"
    script.write_text("import sys; print('pkgutil' in sys.modules)")
    code = (
        "from hpcdist.contract import RankContract; from hpcdist.program import PythonTarget; "
        "from hpcdist.runtime.process import RankProcess; from hpcdist.worker import _run_in_process; "
        f"_run_in_process(RankProcess(RankContract()), PythonTarget('path', {str(script)!r}, ()), 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout == "False\n"
