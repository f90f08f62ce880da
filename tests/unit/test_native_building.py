"""The compiled backend's build, its pure parts: which compiler a failure is recorded for, and what is said."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpcdist.mpi_backend.failures import Compiler, first_error, missing_compiler, record, recorded

# The shape of torch's cpp_extension error: its own first line, ninja's steps, the compiler's lines, ninja's verdict.
FAILED_BUILD = """Error building extension 'hpcdist_native_ea3d35a1552e995a': [1/2] c++ -MMD -O2 -c native.cpp
FAILED: native.o
c++ -MMD -MF native.o.d -DTORCH_EXTENSION_NAME=hpcdist_native -O2 -c /src/native.cpp -o native.o
In file included from /src/native.cpp:3:
/venv/include/torch/extension.h:5:10: fatal error: Python.h: No such file or directory
    5 | #include <Python.h>
compilation terminated.
ninja: build stopped: subcommand failed.
"""


def executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_the_compiler_is_cxx_else_cxx_on_path(tmp_path: Path) -> None:
    gxx = executable(tmp_path / "g++")
    executable(tmp_path / "c++")
    assert Compiler.find({"PATH": str(tmp_path)}).path == str(tmp_path / "c++")
    assert Compiler.find({"PATH": str(tmp_path), "CXX": "g++"}) == Compiler("g++", True, str(gxx), Compiler.find(
        {"PATH": str(tmp_path), "CXX": str(gxx)}).stamp)  # fmt: skip
    assert Compiler.find({"PATH": str(tmp_path / "none")}) == Compiler("c++", False, None, "")
    assert Compiler.find({"PATH": str(tmp_path), "CXX": "g++ -fdiagnostics-color=never"}).path == str(gxx)
    assert Compiler.find({"PATH": str(tmp_path), "CXX": "/nowhere/g++"}) == Compiler("/nowhere/g++", True, None, "")


def test_a_compiler_found_installed_or_replaced_changes_the_identity_a_failure_is_recorded_for(tmp_path: Path) -> None:
    environ = {"PATH": str(tmp_path)}
    before = Compiler.find(environ).identity
    cxx = executable(tmp_path / "c++")
    installed = Compiler.find(environ).identity
    executable(cxx, "#!/bin/sh\n# a newer release\n")
    os.utime(cxx, ns=(1, 1))
    assert len({before, installed, Compiler.find(environ).identity}) == 3
    assert Compiler.find(environ).identity == Compiler.find(dict(environ)).identity  # nothing changed: the same


def test_a_failure_record_counts_for_its_compiler_only_and_keeps_the_whole_output(tmp_path: Path) -> None:
    failed = tmp_path / "ea3d35a1552e995a.failed"
    missing = Compiler("c++", False, None, "")
    found = Compiler("c++", False, "/usr/bin/x86_64-linux-gnu-g++-12", "1000:1")
    assert recorded(failed, missing) is None
    record(failed, missing, "no C++ compiler: `c++` is not on PATH and $CXX is unset", FAILED_BUILD)
    assert recorded(failed, missing) == "no C++ compiler: `c++` is not on PATH and $CXX is unset"
    assert recorded(failed, found) is None
    assert "fatal error: Python.h" in failed.read_text()
    assert [p.name for p in tmp_path.iterdir()] == [failed.name]
    failed.write_text("{not json")
    assert recorded(failed, missing) is None


def test_the_reason_is_the_compilers_first_error_line_not_ninjas_verdict() -> None:
    assert first_error(FAILED_BUILD) == (
        "/venv/include/torch/extension.h:5:10: fatal error: Python.h: No such file or directory"
    )
    linker = "[2/2] c++ native.o -o x.so\nFAILED: x.so\n/usr/bin/ld: cannot find -lmpi: No such file\ncollect2: error:"
    assert first_error(linker) == "/usr/bin/ld: cannot find -lmpi: No such file"
    assert first_error("something else went wrong\nninja: build stopped: subcommand failed.") == (
        "ninja: build stopped: subcommand failed."
    )


def test_a_missing_compiler_is_named_with_how_to_fix_it() -> None:
    unset = missing_compiler(Compiler("c++", False, None, ""))
    assert unset.startswith("no C++ compiler: `c++` is not on PATH and $CXX is unset; ")
    given = missing_compiler(Compiler("/opt/gcc/bin/g++", True, None, ""))
    assert given.startswith("no C++ compiler: $CXX=/opt/gcc/bin/g++ is not an executable file (nor a command on PATH)")
    for text in (unset, given):
        assert text.endswith("install one (apt-get install g++) or set HPCDIST_MPI_NATIVE=0 to use the Python backend "
                             "knowingly")  # fmt: skip


def test_a_build_runs_the_compiler_in_a_child_with_its_own_environment_and_leaves_this_one_alone(
    tmp_path: Path, monkeypatch
) -> None:
    import ninja

    from hpcdist.mpi_backend import building
    from hpcdist.mpi_backend.variants import SANITIZED

    saw = tmp_path / "saw.json"  # a stand-in for the child: it writes what it was given, as the compiler would see it
    child = f"import json, os, sys; open({str(saw)!r}, 'w').write(json.dumps([dict(os.environ), sys.argv[1]]))"
    monkeypatch.setattr(building, "_CHILD", child)
    monkeypatch.setenv("CXX", "cc-of-the-caller")
    before = dict(os.environ)
    compiler = Compiler("g++", True, "/usr/bin/g++", "1:1")
    directory, failed = tmp_path / "K.tmp-host-1", tmp_path / "K.failed"
    building._compile("m", SANITIZED["tsan"], compiler, Path("/mpi/include"), Path("/mpi/lib/libmpi.so.40"),
                      directory, failed, verbose=False)  # fmt: skip
    assert dict(os.environ) == before
    environ, given = json.loads(saw.read_text())
    assert environ["PATH"].split(os.pathsep)[0] == ninja.BIN_DIR and environ["CXX"] == "g++"
    arguments = json.loads(given)
    assert arguments["build_directory"] == str(directory) and directory.is_dir()
    assert "-fsanitize=thread" in arguments["extra_cflags"] and "-fsanitize=thread" in arguments["extra_ldflags"]

    monkeypatch.setattr(building, "_CHILD", f"import sys; print({FAILED_BUILD!r}); sys.exit(1)")
    with pytest.raises(building.BuildFailed, match=r"^building it with /usr/bin/g\+\+ failed: /venv/include/torch/"):
        building._compile("m", SANITIZED["tsan"], compiler, Path("/i"), Path("/l/libmpi.so"), tmp_path / "K.tmp-h-2",
                          failed, verbose=False)  # fmt: skip
    assert dict(os.environ) == before
    assert recorded(failed, compiler) is not None and not (tmp_path / "K.tmp-h-2").exists()


def test_each_sanitizer_has_a_test_build_and_none_of_their_flags_reach_the_normal_build() -> None:
    from hpcdist import settingtable
    from hpcdist.mpi_backend.variants import NORMAL, SANITIZED, chosen

    assert tuple(SANITIZED) == settingtable.SANITIZERS
    assert NORMAL.cflags == ("-O2",) and NORMAL.ldflags == () and NORMAL.runtime is None
    assert chosen({}) is NORMAL and chosen({"HPCDIST_MPI_SANITIZER": "asan"}) is SANITIZED["asan"]
    for variant in SANITIZED.values():
        assert "-DHPCDIST_NATIVE_TESTING" in variant.cflags and variant.key("0123") == f"{variant.name}_0123"
    assert "-fno-sanitize-recover=undefined" in SANITIZED["asan"].cflags
    assert NORMAL.key("0123") == "0123"
