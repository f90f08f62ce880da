"""Code shipped by value keeps its file name and brings its source lines, on the oldest and newest cloudpickle."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = """
import linecache, sys
from pathlib import Path
import cloudpickle
from hpcdist.calling.byvalue import dumps

def fail(x):
    raise ValueError(f"bad {x} on cloudpickle {cloudpickle.__version__}")

check = lambda x: fail(x)

def closure(k):
    def scaled():
        return check(k)
    return scaled

def step():
    return closure(2)()

cell = "def broken():\\n    raise KeyError('in a cell')\\n"
name = "/nowhere/ipykernel_1/2.py"          # as IPython names a cell: no such file, its lines in linecache only
linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)
exec(compile(cell, name, "exec"), globals())

for case, fn in [("main", step), ("lambda", lambda: check(1)), ("closure", closure(5)), ("cell", broken)]:
    Path(sys.argv[1], case).write_bytes(dumps(fn))
"""

LOAD = """
import pickle, sys, traceback
try:
    pickle.loads(open(sys.argv[1], "rb").read())()
except Exception:
    print(traceback.format_exc())
"""


def frame(path: str, text: str, source: str, function: str) -> str:
    """How traceback prints the frame of `function` at the line of `text` (a file at `path`) that is `source`."""
    line = [row.strip() for row in text.splitlines()].index(source) + 1
    return f'  File "{path}", line {line}, in {function}\n    {source}\n'


def test_a_loaded_function_raises_with_the_callers_file_line_and_source_even_where_the_file_is_gone(
    tmp_path: Path, cloudpickle_path: tuple[str, str]
) -> None:
    version, pythonpath = cloudpickle_path
    env = {**os.environ, "PYTHONPATH": pythonpath}
    script = tmp_path / "script.py"
    text = textwrap.dedent(SCRIPT)
    script.write_text(text)
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, env=env, timeout=60)
    script.unlink()  # the lines come with the code, as to a host that cannot read the caller's files
    tracebacks = {}
    for case in ("main", "lambda", "closure", "cell"):
        loaded = subprocess.run(
            [sys.executable, "-c", LOAD, str(tmp_path / case)], capture_output=True, text=True, env=env, timeout=60
        )
        tracebacks[case] = loaded.stdout
    raised = frame(str(script), text, 'raise ValueError(f"bad {x} on cloudpickle {cloudpickle.__version__}")', "fail")
    in_check = frame(str(script), text, "check = lambda x: fail(x)", "<lambda>")
    in_closure = frame(str(script), text, "return check(k)", "scaled")
    main = tracebacks["main"]
    assert frame(str(script), text, "return closure(2)()", "step") in main, main
    assert in_closure in main and in_check in main and raised in main, main
    assert main.endswith(f"ValueError: bad 2 on cloudpickle {version}\n\n"), main
    assert in_check in tracebacks["lambda"] and raised in tracebacks["lambda"], tracebacks["lambda"]
    assert in_closure in tracebacks["closure"] and raised in tracebacks["closure"], tracebacks["closure"]
    cell = tracebacks["cell"]
    assert "  File \"/nowhere/ipykernel_1/2.py\", line 2, in broken\n    raise KeyError('in a cell')\n" in cell, cell
