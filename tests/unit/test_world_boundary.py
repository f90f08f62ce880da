"""Below the launch pipeline's entry nothing reads the world on its own: the syntax trees say so.

What a launch takes from the world (the environment, our stdout and stderr, PATH, the user, the Python, the host,
the CPUs) is read once, by `World.current()` in hpcdist/launching/world.py, at each entry: the `hpcdist mpirun`
command (cli/), `hpcdist.launch` (calling/pyfunc.py), `hpcdist.submit` (jobs/submit.py), the doctor (cli/ and
doctor/probe.py, whose rank-side probe reads its own rank's environment) and script generation (cli/, and
jobs/examples.py, the `make examples` command). Every module below them takes the World, or the piece it needs, as a
parameter. BELOW lists those modules, by path under hpcdist/:

- `launching/`, all of it but `world.py` (the one reader): the pipeline (options, plan, execute, restarts) and its
  pieces (hostfiles, the argv builder, spawn, the watch, output, heartbeats, sessions, host names);
- `families/` and `schedulers/`: the MPI and scheduler plug-ins, pure by design (empty until they exist);
- the job generation's builders: `jobs/{arrays,local,profiles,sbatch,slurmjob,torchrun,torchrunlogs}.py` (not
  `jobs/render.py`, the template loader, which falls back to the environment for a caller that passes none);
- the call's files: `calling/{byvalue,calls}.py`.

A module there may not name `os.environ`, `os.environb`, `os.getenv`, `os.get_exec_path`, `os.geteuid`,
`os.cpu_count`, `os.sched_getaffinity`, `sys.stdout`, `sys.stderr`, `sys.executable`, `shutil.which` or
`socket.gethostname`, import any of them by name, or call `print` without a `file=` (that writes to sys.stdout).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hpcdist"
BELOW = (
    "launching/*.py",
    "families/*.py",
    "schedulers/*.py",
    "jobs/arrays.py",
    "jobs/local.py",
    "jobs/profiles.py",
    "jobs/sbatch.py",
    "jobs/sbatchspec.py",
    "jobs/slurmjob.py",
    "jobs/torchrun.py",
    "jobs/torchrunlogs.py",
    "calling/byvalue.py",
    "calling/calls.py",
)
READER = "launching/world.py"
FORBIDDEN = {
    "os": {"environ", "environb", "getenv", "get_exec_path", "geteuid", "cpu_count", "sched_getaffinity"},
    "sys": {"stdout", "stderr", "executable"},
    "shutil": {"which"},
    "socket": {"gethostname"},
}


def _modules() -> list[Path]:
    """The modules below the entry, each once."""
    found = {path for pattern in BELOW for path in PACKAGE.glob(pattern)}
    return sorted(found - {PACKAGE / READER})


def _reads(tree: ast.AST) -> list[str]:
    """Where a module reads the world itself: 'line N: os.environ', ..."""
    aliases = {}  # a name the module gave a forbidden module: `import os as _os`
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({alias.asname or alias.name: alias.name for alias in node.names if alias.name in FORBIDDEN})
        elif isinstance(node, ast.ImportFrom) and node.module in FORBIDDEN:
            found += [f"line {node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if a.name in FORBIDDEN[node.module]]  # fmt: skip
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = aliases.get(node.value.id, node.value.id if node.value.id in FORBIDDEN else None)
            if module is not None and node.attr in FORBIDDEN[module]:
                found.append(f"line {node.lineno}: {module}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found += [] if any(kw.arg == "file" for kw in node.keywords) else [f"line {node.lineno}: print, no file="]
    return found


def test_the_set_below_the_entry_is_the_pipeline_and_its_builders() -> None:
    names = {str(path.relative_to(PACKAGE)) for path in _modules()}
    assert {"launching/plan.py", "launching/execute.py", "launching/spawn.py", "jobs/sbatch.py"} <= names
    assert READER not in names and (PACKAGE / READER).exists()


@pytest.mark.parametrize("path", _modules(), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_no_module_below_the_entry_reads_the_world_itself(path: Path) -> None:
    assert _reads(ast.parse(path.read_text(encoding="utf-8"), str(path))) == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import os\nos.environ.get('X')", ["line 2: os.environ"]),
        ("import os as o\nx = o.getenv('X')", ["line 2: os.getenv"]),
        ("from os import environ", ["line 1: from os import environ"]),
        ("import sys\nsys.stderr.write('x')\nprint('y')", ["line 2: sys.stderr", "line 3: print, no file="]),
        ("import shutil, socket\nshutil.which('mpirun') or socket.gethostname()",
         ["line 2: shutil.which", "line 2: socket.gethostname"]),
        ("def f(world):\n    print('x', file=world.stderr)\n    return world.environ['PATH']", []),
    ],
)  # fmt: skip
def test_the_walk_finds_each_kind_of_read(source: str, found: list[str]) -> None:
    assert sorted(_reads(ast.parse(source))) == sorted(found)
