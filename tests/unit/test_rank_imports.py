"""What a rank's shim loads before its program (a rank's start-up cost, docs/measurements/rank-cost.md): counted in a
fresh interpreter, so the guard cannot flake on a loaded machine."""

from __future__ import annotations

import json
import subprocess
import sys

# Loaded by `import hpcdist.worker` (the shim's imports) in a fresh Python: the modules it added, and every compiled
# pattern that a plug-in module (a family's or a scheduler's) defines, in its globals or its classes' attributes (one
# it imports from a leaf, such as hosts.HOST_NAME, is the leaf's).
_PROBE = """
import sys
before = set(sys.modules)
import hpcdist.worker
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
print(json.dumps({"loaded": loaded, "compiled": held}))
"""


def _shim_imports() -> dict[str, list[str]]:
    """The modules the shim's imports load, and the plug-in patterns they compile."""
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout)


def test_the_shim_loads_no_launcher_side_module_and_no_library_of_another_feature() -> None:
    loaded = set(_shim_imports()["loaded"])
    assert "hpcdist.families.openmpi" in loaded  # every plug-in, for its ranks' variables: the probe saw them
    unwanted = {"torch", "numpy", "json", "datetime", "subprocess", "tempfile", "shutil", "hpcdist.forensics.pyspy"}
    assert loaded & unwanted == set()
    wings = ("hpcdist.launching", "hpcdist.cli", "hpcdist.calling", "hpcdist.jobs", "hpcdist.doctor", "hpcdist.bench")
    assert [name for name in loaded if name.startswith(wings)] == []


def test_no_plug_in_compiles_a_pattern_when_a_rank_imports_it() -> None:
    """A family's or a scheduler's patterns read its launcher's output: a LazyPattern, compiled by the launcher."""
    assert _shim_imports()["compiled"] == []
