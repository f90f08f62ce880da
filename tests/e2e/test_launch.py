"""`hpcdist.launch` end to end: a Python function on real ranks through hpcdist's mpirun, from a __main__ script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from launching import PROGRAMS, launch


def _driver(tmp_path: Path, code: str, timeout: float = 240, **env: str):
    """Run `code` as a script's __main__ (so its functions are __main__'s, as in a notebook) and parse its JSON."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(code))
    result = launch([sys.executable, str(script)], timeout=timeout, **env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    return result, [json.loads(line) for line in lines]


def test_values_come_back_in_rank_order_from_main_functions_lambdas_and_closures(tmp_path) -> None:
    result, out = _driver(
        tmp_path,
        """
        import json, hpcdist, torch, torch.distributed as dist
        scale = 10                                  # closed over: cloudpickle sends it by value
        def step(rank, x, *, y):
            total = torch.tensor([float(dist.get_rank())])
            dist.all_reduce(total)
            return [rank, dist.get_rank(), dist.get_world_size(), x * scale + y, total.item()]
        print(json.dumps({"three": hpcdist.launch(step, hpcdist.RANK, 2, y=1, np=3)}))
        print(json.dumps({"one": hpcdist.launch(lambda: dist.get_world_size() * scale, np=1, backend="gloo")}))
        try:
            hpcdist.launch(lambda: dist.init_process_group("nccl"), np=1, backend="gloo")
        except hpcdist.RankFailed as exc:
            print(json.dumps({"mismatch": [exc.kind, exc.message]}))
    """,
    )
    assert result.returncode == 0, result.stderr
    assert out[0] == {"three": [[r, r, 3, 21, 3.0] for r in range(3)]}
    assert out[1] == {"one": [10]}
    kind, message = out[2]["mismatch"]
    assert kind == "UsageError"
    assert "already initialised the process group with backend 'gloo'; pass backend='nccl'" in message


def test_a_failing_rank_is_raised_in_the_caller_with_its_rank_type_and_traceback(tmp_path) -> None:
    result, out = _driver(
        tmp_path,
        """
        import json, hpcdist, torch, torch.distributed as dist
        def step():
            if dist.get_rank() == 1:
                raise ValueError("NaN in the gradients")
            dist.all_reduce(torch.ones(1))          # ranks 0 and 2 wait for rank 1 here
        try:
            hpcdist.launch(step, np=3, backend="gloo")
        except hpcdist.RankFailed as exc:
            print(json.dumps({"rank": exc.rank, "kind": exc.kind, "cause": repr(exc.__cause__),
                              "traceback": exc.remote_traceback, "text": str(exc)}))
    """,
        HPCDIST_TIMEOUT="600",  # longer than the driver may run: the others must not wait it out
    )
    assert result.returncode == 0, result.stderr
    (failed,) = out
    assert (failed["rank"], failed["kind"], failed["cause"]) == (1, "ValueError", "ValueError('NaN in the gradients')")
    assert 'raise ValueError("NaN in the gradients")' in failed["traceback"]
    assert failed["traceback"].startswith('Traceback (most recent call last):\n  File "' + str(tmp_path))
    assert failed["text"].startswith("rank 1 on ")


def frame(path: Path, text: str, source: str, function: str) -> str:
    """How traceback prints the frame of `function` at the line of `text` (a file at `path`) that is `source`."""
    line = [row.strip() for row in text.splitlines()].index(source) + 1
    return f'  File "{path}", line {line}, in {function}\n    {source}\n'


def test_a_failing_ranks_traceback_names_the_callers_file_line_and_source_for_main_functions_lambdas_and_closures(
    tmp_path, cloudpickle_path
) -> None:
    version, pythonpath = cloudpickle_path
    code = """
        import json, cloudpickle, hpcdist, torch.distributed as dist
        def fail(x):
            raise ValueError(f"NaN at {x} on cloudpickle {cloudpickle.__version__}")
        check = lambda x: fail(x) if dist.get_rank() == 1 else x
        def closure(k):
            def scaled():
                return check(k)
            return scaled
        def step():
            return closure(2)()
        for case, fn in [("main", step), ("lambda", lambda: check(1)), ("closure", closure(5))]:
            try:
                hpcdist.launch(fn, np=2, backend="gloo")
            except hpcdist.RankFailed as exc:
                print(json.dumps({"case": case, "rank": exc.rank, "traceback": exc.remote_traceback}))
    """
    result, out = _driver(tmp_path, code, PYTHONPATH=pythonpath)
    assert result.returncode == 0, result.stderr
    by_case = {o["case"]: o for o in out}
    assert sorted(by_case) == ["closure", "lambda", "main"] and {o["rank"] for o in out} == {1}, out
    script, text = tmp_path / "driver.py", textwrap.dedent(code)
    raised = frame(script, text, 'raise ValueError(f"NaN at {x} on cloudpickle {cloudpickle.__version__}")', "fail")
    in_check = frame(script, text, "check = lambda x: fail(x) if dist.get_rank() == 1 else x", "<lambda>")
    in_closure = frame(script, text, "return check(k)", "scaled")
    main = by_case["main"]["traceback"]
    assert frame(script, text, "return closure(2)()", "step") in main, main
    assert in_closure in main and in_check in main and raised in main, main
    assert main.endswith(f"ValueError: NaN at 2 on cloudpickle {version}\n"), main
    lam = by_case["lambda"]["traceback"]
    shipped = 'for case, fn in [("main", step), ("lambda", lambda: check(1)), ("closure", closure(5))]:'
    assert frame(script, text, shipped, "<lambda>") in lam, lam
    assert in_check in lam and raised in lam and lam.endswith(f"NaN at 1 on cloudpickle {version}\n"), lam
    shut = by_case["closure"]["traceback"]
    assert in_closure in shut and in_check in shut and shut.endswith(f"NaN at 5 on cloudpickle {version}\n"), shut


def test_a_function_or_argument_that_cannot_be_sent_is_an_error_before_any_process_starts(tmp_path) -> None:
    marker = tmp_path / "mpirun-started"
    wrapper = tmp_path / "mpirun"
    mpirun = Path(sys.executable).parent / "mpirun"
    wrapper.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec "{mpirun}" "$@"\n')
    wrapper.chmod(0o755)
    result, out = _driver(
        tmp_path,
        f"""
        import json, os, threading, hpcdist
        lock = threading.Lock()
        def holds():
            return lock.locked()                    # closes over a lock: cannot be sent
        for name, call in [("function", lambda: hpcdist.launch(holds, np=2)),
                           ("argument", lambda: hpcdist.launch(print, 1, threading.Lock(), np=2)),
                           ("keyword", lambda: hpcdist.launch(print, file=open(os.devnull, "w"), np=2))]:
            try:
                call()
            except hpcdist.UsageError as exc:
                print(json.dumps({{"case": name, "error": str(exc), "started": os.path.exists({str(marker)!r})}}))
        print(json.dumps({{"case": "fine", "value": hpcdist.launch(len, "ab", np=1, backend="gloo"),
                          "started": os.path.exists({str(marker)!r})}}))
    """,
        HPCDIST_MPIRUN=str(wrapper),
    )
    assert result.returncode == 0, result.stderr
    by_case = {o["case"]: o for o in out}
    assert by_case["function"]["error"].startswith("hpcdist.launch cannot send the function holds (function)")
    assert (
        "create such objects (locks, open files, sockets, CUDA state) inside the function"
        in by_case["function"]["error"]
    )
    assert by_case["argument"]["error"].startswith("hpcdist.launch cannot send argument 1 of print (lock) to the ranks")
    assert by_case["keyword"]["error"].startswith("hpcdist.launch cannot send keyword argument file= of print")
    assert not any(by_case[case]["started"] for case in ("function", "argument", "keyword"))
    assert by_case["fine"] == {"case": "fine", "value": [2], "started": True}  # the wrapper does see a launch


def test_the_timeout_ends_the_job_and_says_who_waited_for_what(tmp_path) -> None:
    shared = tmp_path / "launches"
    shared.mkdir()
    result, out = _driver(
        tmp_path,
        """
        import json, time, hpcdist, torch.distributed as dist
        def slow():
            if dist.get_rank() == 1:
                time.sleep(600)
            return dist.get_rank()
        began = time.monotonic()
        try:
            hpcdist.launch(slow, np=2, timeout=25)
        except hpcdist.LaunchTimeout as exc:
            print(json.dumps({"error": str(exc), "seconds": time.monotonic() - began}))
    """,
        HPCDIST_LAUNCH_DIR=str(shared),
    )
    assert result.returncode == 0, result.stderr
    (timed_out,) = out
    assert timed_out["error"].startswith(
        "hpcdist.launch waited 25 s for the 2 ranks of slow to return; rank 0 returned, rank 1 did not"
    )
    assert timed_out["seconds"] >= 25  # not before its time; the driver's own timeout bounds it from above
    assert list(shared.iterdir()) == []  # the private directory is gone
    left = subprocess.run(["pgrep", "-f", str(shared)], capture_output=True, text=True)
    assert left.stdout == "", "ranks outlived the timeout"


def test_with_the_default_backend_the_functions_own_init_process_group_gets_the_backend_it_asks_for(tmp_path) -> None:
    result, out = _driver(
        tmp_path,
        """
        import json, os, hpcdist, torch, torch.distributed as dist
        def spawned(rank, world_size):               # written for mp.spawn: its own init, its own backend
            before = dist.get_backend()
            dist.init_process_group("gloo", rank=rank, world_size=world_size)
            total = torch.ones(1)
            dist.all_reduce(total)
            return [before, dist.get_backend(), total.item()]
        print(json.dumps({"auto": hpcdist.launch(spawned, hpcdist.RANK, 3, np=3)}))
        print(json.dumps({"gloo": hpcdist.launch(spawned, hpcdist.RANK, 1, np=1, backend="gloo")}))
    """,
    )
    assert result.returncode == 0, result.stderr
    assert out[0] == {"auto": [["mpi4py", "gloo", 3.0]] * 3}, out
    assert out[1] == {"gloo": [["gloo", "gloo", 1.0]]}, out


def test_seed_004_mp_process_example_runs_with_only_its_launch_call_changed() -> None:
    result = launch([sys.executable, str(PROGRAMS / "seed004_process.py")])
    assert result.returncode == 0, result.stderr
    lines = set(result.stdout.splitlines())
    assert {f"Rank: {r}, has data: tensor([5., 7., 9.])" for r in range(2)} <= lines


def test_seed_000_ray_example_runs_through_launch_and_map_with_only_rays_calls_changed() -> None:
    result = launch([sys.executable, str(PROGRAMS / "seed000_ray.py")])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]"]


def test_seed_000_mp_spawn_ddp_example_gets_hpcdists_hint_and_runs_once_changed_as_it_says(tmp_path) -> None:
    program = PROGRAMS / "seed000_ddp.py"
    result = launch([sys.executable, str(program)])
    assert result.returncode == 1
    assert "hpcdist.errors.RankFailed: rank " in result.stderr
    assert "but got device_ids [" in result.stderr  # torch's own words, on the rank that failed first
    assert (
        "hpcdist: hint: the model is on the CPU, where DDP takes no device_ids: write DistributedDataParallel(model)"
        in result.stderr
    )
    fixed = tmp_path / "seed000_fixed.py"
    text = program.read_text()
    assert text.count("DistributedDataParallel(model, device_ids=[rank])") == 1
    fixed.write_text(
        text.replace("DistributedDataParallel(model, device_ids=[rank])", "DistributedDataParallel(model)")
    )
    result = launch([sys.executable, str(fixed)], PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    assert result.returncode == 0, result.stderr
    assert {"Rank 0 finished training.", "Rank 1 finished training."} <= set(result.stdout.splitlines())


def test_a_class_defined_in_an_interactive_session_without_a_file_runs(tmp_path) -> None:
    code = textwrap.dedent("""
        import hpcdist, torch.distributed as dist
        class Scaled:                               # defined in <stdin>: no file for the ranks to import
            def __init__(self, k):
                self.k = k
            def __call__(self, x):
                return self.k * x + dist.get_rank()
        print(hpcdist.launch(Scaled(10), 4, np=2, backend="gloo"))
    """)
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    done = subprocess.run(
        [sys.executable, "-"], input=code, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[40, 41]"


def test_a_rank_leaving_by_sys_exit_0_or_asking_for_an_array_task_outside_an_array_is_named(tmp_path) -> None:
    result, out = _driver(
        tmp_path,
        """
        import json, sys, hpcdist
        def leaves(rank):
            if rank == 1:
                sys.exit(0)                         # as StopAtStepBoundary.exit() does before a requeue
            return rank
        for call in (lambda: hpcdist.launch(leaves, hpcdist.RANK, np=2, backend="gloo"),
                     lambda: hpcdist.launch(print, hpcdist.ARRAY_TASK, np=1, backend="gloo")):
            try:
                call()
            except hpcdist.RankFailed as exc:
                print(json.dumps({"rank": exc.rank, "kind": exc.kind, "message": exc.message}))
    """,
    )
    assert result.returncode == 0, result.stderr
    left, array = out
    assert (left["rank"], left["kind"]) == (1, "no outcome"), out
    assert left["message"].startswith("rank 1 of leaves ended without returning or raising"), out
    assert "hpcdist: rank 1 on " in result.stderr and "left by sys.exit(0): no value to return" in result.stderr
    assert (array["rank"], array["kind"]) == (0, "UsageError"), out
    assert "hpcdist.ARRAY_TASK stands for the task id of a Slurm job array, and this job is none" in array["message"]


NOTEBOOK_CELLS = [
    """
import hpcdist, torch, torch.distributed as dist

class Scale:                                   # a class of the notebook: no file to import it from
    def __init__(self, k):
        self.k = k

def cell(x):
    total = torch.ones(1) * Scale(x).k
    dist.all_reduce(total)
    print("rank", dist.get_rank(), "says", total.item(), flush=True)
    return total.item()

hpcdist.launch(cell, 3, np=2)
""",
    """
import cloudpickle

def broken():
    raise KeyError(f"in a notebook on cloudpickle {cloudpickle.__version__}")

try:
    hpcdist.launch(broken, np=2, backend="gloo", timeout=120)
except hpcdist.RankFailed as exc:
    print("caught", exc.kind, type(exc.__cause__).__name__)
    print(exc.remote_traceback, end="")
""",
]


def test_a_real_jupyter_kernel_launches_its_own_functions_and_shows_the_ranks_output(cloudpickle_path) -> None:
    """As in a notebook: cells run in an IPython kernel (its __main__ is not a file; its stdout is the kernel's
    stream to the client, not a file descriptor); the ranks' lines arrive as the cell's output, and a failing rank's
    traceback shows the cell's lines (which only the kernel's linecache holds), on the oldest and newest cloudpickle."""
    from jupyter_client.manager import start_new_kernel

    version, pythonpath = cloudpickle_path
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "PYTHONPATH": pythonpath}
    manager, client = start_new_kernel(kernel_name="python3", env=env, cwd=str(PROGRAMS))
    try:
        outputs = [_run_cell(client, code) for code in NOTEBOOK_CELLS]
    finally:
        manager.shutdown_kernel(now=True)
    values, failure = outputs
    assert values["result"] == ["[6.0, 6.0]"], values
    assert sorted(values["stdout"].splitlines()) == ["rank 0 says 6.0", "rank 1 says 6.0"], values
    caught, traceback = failure["stdout"].split("\n", 1)
    assert caught == "caught KeyError KeyError", failure
    source = 'raise KeyError(f"in a notebook on cloudpickle {cloudpickle.__version__}")'
    line = [row.strip() for row in NOTEBOOK_CELLS[1].lstrip("\n").splitlines()].index(source) + 1  # as IPython runs it
    cell = re.search(
        rf'\n  File "([^"]*ipykernel_\d+/\d+\.py)", line {line}, in broken\n    {re.escape(source)}\n', traceback
    )
    assert cell and not os.path.exists(cell[1]), traceback  # a cell's file name, no file: the lines came with the code
    assert traceback.endswith(f"KeyError: 'in a notebook on cloudpickle {version}'\n"), traceback
    assert "error" not in values and "error" not in failure, outputs


def _run_cell(client, code: str) -> dict:
    """Execute one cell; its streams, results and error, joined by kind."""
    msg_id = client.execute(code)
    out: dict = {}
    while True:
        msg = client.get_iopub_msg(timeout=180)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out[content["name"]] = out.get(content["name"], "") + content["text"]
        elif kind == "execute_result":
            out.setdefault("result", []).append(content["data"]["text/plain"])
        elif kind == "error":
            out["error"] = f"{content['ename']}: {content['evalue']}"
        elif kind == "status" and content["execution_state"] == "idle":
            return out


def test_a_hang_ends_in_the_hang_report_and_rankfailed_naming_the_rank_the_others_waited_for(tmp_path) -> None:
    result, out = _driver(
        tmp_path,
        """
        import json, time, hpcdist, torch, torch.distributed as dist
        def step(rank):
            if rank == 1:
                time.sleep(120)                     # outside any communication call: the others wait for it
            total = torch.ones(1)
            dist.all_reduce(total)
            return total.item()
        try:
            hpcdist.launch(step, hpcdist.RANK, np=3, backend="gloo")
        except hpcdist.RankFailed as exc:
            print(json.dumps({"rank": exc.rank, "host": exc.host, "kind": exc.kind, "said": str(exc)}))
    """,
        HPCDIST_TIMEOUT="4",  # the hang timeout, per communication call; launch's own timeout= is for the whole call
    )
    assert result.returncode == 0, result.stderr
    ((hung,),) = [out]
    assert (hung["rank"], hung["kind"]) == (1, "hang"), hung
    assert hung["said"] == (
        f"step hung: rank 1 on {hung['host']} was in no communication call while ranks 0,2 waited in all_reduce #1 "
        "(the hang report above shows every rank)"
    )
    assert result.stderr.count("first divergence:") == 1, result.stderr  # the report, once
