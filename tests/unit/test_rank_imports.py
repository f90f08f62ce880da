"""What a rank's shim loads before its program (a rank's start-up cost, docs/measurements/rank-cost.md): counted in a
fresh interpreter, so the guard cannot flake on a loaded machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Loaded by `import hpcdist.worker` (the shim's imports) in a fresh Python, then by reading the launcher's variables
# as a rank does that its launcher did not tell its family and scheduler (every plug-in): the modules each added, and
# every compiled pattern that a plug-in module (a family's or a scheduler's) defines, in its globals or its classes'
# attributes (one it imports from a leaf, such as hosts.HOST_NAME, is the leaf's).
_PROBE = """
import sys
before = set(sys.modules)
import hpcdist.worker
at_import = sorted(set(sys.modules) - before)
from hpcdist.runtime.env import LaunchEnv
LaunchEnv.from_environ({})
loaded = sorted(set(sys.modules) - before)
import json, re
from hpcdist.plugins import LazyPattern
plug_ins = [name for name in loaded if name.startswith(("hpcdist.families.", "hpcdist.schedulers."))]
leaves = {id(value) for name in loaded if name not in plug_ins for value in vars(sys.modules[name]).values()}
held = []
for name in plug_ins:
    module = vars(sys.modules[name])
    for place in [module, *(vars(c) for c in module.values() if isinstance(c, type) and c.__module__ == name)]:
        for key, value in place.items():
            compiled = isinstance(value, re.Pattern) and id(value) not in leaves
            if compiled or isinstance(value, LazyPattern) and value._compiled is not None:
                held.append(f"{name}.{key}")
print(json.dumps({"at_import": at_import, "loaded": loaded, "compiled": held}))
"""


def _shim_imports() -> dict[str, list[str]]:
    """The modules the shim's imports load, and the plug-in patterns they compile."""
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout)


def test_the_shim_loads_no_launcher_side_module_and_no_library_of_another_feature() -> None:
    imports = _shim_imports()
    plug_ins = ("hpcdist.families.", "hpcdist.schedulers.")
    at_import = [name for name in imports["at_import"] if name.startswith(plug_ins) and not name.endswith(".base")]
    assert at_import == []  # each is loaded as a rank reads its launcher's variables
    loaded = set(imports["loaded"])
    assert {"hpcdist.families.openmpi", "hpcdist.schedulers.slurm"} <= loaded  # every plug-in: the probe saw them
    unwanted = {"torch", "numpy", "json", "datetime", "subprocess", "tempfile", "shutil", "hpcdist.forensics.pyspy"}
    assert loaded & unwanted == set()
    wings = ("hpcdist.launching", "hpcdist.cli", "hpcdist.calling", "hpcdist.jobs", "hpcdist.doctor", "hpcdist.bench")
    assert [name for name in loaded if name.startswith(wings)] == []


def test_no_plug_in_compiles_a_pattern_when_a_rank_imports_it() -> None:
    """A family's or a scheduler's patterns read its launcher's output: a LazyPattern, compiled by the launcher."""
    assert _shim_imports()["compiled"] == []


@pytest.mark.parametrize(
    ("mpi", "scheduler", "expected"),
    [
        ("openmpi", "none", ["hpcdist.families.openmpi"]),
        ("intel", "slurm", ["hpcdist.families.intel", "hpcdist.families.mpich", "hpcdist.schedulers.slurm"]),
    ],
)
def test_a_rank_told_its_launcher_loads_its_plug_ins_alone(mpi: str, scheduler: str, expected: list[str]) -> None:
    """A rank whose launcher named its MPI family and scheduler (the contract's `mpi` and `scheduler`) reads their
    variables alone, importing no other plug-in (a rank's start: 3.5 ms); Intel MPI's ranks read Hydra's."""
    code = f"""
import json, sys
from hpcdist.runtime.env import LaunchEnv
env = LaunchEnv.from_environ({{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
    "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}}, {mpi!r}, {scheduler!r})
plug_ins = ("hpcdist.families.", "hpcdist.schedulers.")
print(json.dumps([env.rank, env.world_size, sorted(n for n in sys.modules if n.startswith(plug_ins))]))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    base = ["hpcdist.families.base", "hpcdist.schedulers.base"]
    assert json.loads(result.stdout) == [1, 2, sorted([*base, *expected])]
