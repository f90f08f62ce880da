"""The user's settings, the launcher's contract as a rank reads it, and the rank side's one home for each small idea."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import hpcdist
from hpcdist import settings, settingtable
from hpcdist.contract import RESTART_VARS, RankContract
from hpcdist.errors import UsageError
from hpcdist.events import Usage, parse_event

PACKAGE = Path(hpcdist.__file__).parent
TOKEN = "0123456789abcdef"
_VARIABLE = r"(?<!-D)HPCDIST_[A-Z_]+"  # a variable's name; not a C macro the compiled backend is built with (-D)


def _literals(path: Path) -> list[str]:
    """Every string or bytes constant of a module (docstrings and f-strings' parts included) that names a variable."""
    tree = ast.parse(path.read_text(), str(path))
    constants = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    texts = [str(value) for value in constants if isinstance(value, str | bytes)]
    return [text for text in texts if re.search(_VARIABLE, text)]


def test_hpcdist_s_variables_are_spelled_out_only_in_the_contract_and_the_settings() -> None:
    spelled = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if _literals(path)}
    assert spelled == {"contract.py", "settingtable.py"}  # every other module reads a setting or the contract's field


def test_every_variable_the_package_names_is_a_setting_or_the_contract_s() -> None:
    named = {m for path in PACKAGE.rglob("*.py") for m in re.findall(_VARIABLE, path.read_text())}
    known = {s.name for s in settingtable.SETTINGS} | {*RankContract.VARIABLES.values(), *RESTART_VARS}
    assert named <= known
    for setting in settingtable.SETTINGS:  # each has its one reader, named after it
        assert callable(getattr(settings, setting.name.removeprefix("HPCDIST_").lower()))


@pytest.mark.parametrize(
    ("read", "environ", "value"),
    [
        (settings.timeout, {}, 300.0),
        (settings.timeout, {"HPCDIST_TIMEOUT": "2.5"}, 2.5),
        (settings.startup_timeout, {}, 60.0),
        (settings.startup_timeout, {"HPCDIST_STARTUP_TIMEOUT": "900"}, 900.0),
        (settings.store, {}, "auto"),
        (settings.store, {"HPCDIST_STORE": "mpi"}, "mpi"),
        (settings.forensics, {}, True),
        (settings.forensics, {"HPCDIST_FORENSICS": "0"}, False),
        (settings.debug, {"HPCDIST_DEBUG": "0"}, False),
        (settings.debug, {"HPCDIST_DEBUG": "yes"}, True),
        (settings.heartbeat_timeout, {}, None),
        (settings.heartbeat_timeout, {"HPCDIST_HEARTBEAT_TIMEOUT": "0"}, 0.0),
        (settings.kill_wait, {}, 30.0),
        (settings.kill_wait, {"HPCDIST_KILL_WAIT": "0"}, 0.0),
        (settings.kill_wait, {"HPCDIST_KILL_WAIT": "120"}, 120.0),
        (settings.mpi_native, {"HPCDIST_MPI_NATIVE": " AUTO "}, "auto"),
        (settings.mpi_ring_bytes, {"HPCDIST_MPI_RING_BYTES": "-1"}, -1),
        (settings.mpi_build_wait, {}, 600.0),
        (settings.mpi_sanitizer, {}, None),
        (settings.mpi_sanitizer, {"HPCDIST_MPI_SANITIZER": ""}, None),
        (settings.mpi_sanitizer, {"HPCDIST_MPI_SANITIZER": "tsan"}, "tsan"),
        (settings.mpi_sanitizer, {"HPCDIST_MPI_SANITIZER": "asan"}, "asan"),
        (settings.mpi_cuda_aware, {"HPCDIST_MPI_CUDA_AWARE": "1"}, True),
        (settings.mpirun, {"HPCDIST_MPIRUN": ""}, None),
        (settings.topology, {"HPCDIST_TOPOLOGY": "/t.xml"}, "/t.xml"),
    ],
)
def test_each_setting_is_read_as_its_kind(read, environ: dict[str, str], value: object) -> None:
    assert read(environ) == value


@pytest.mark.parametrize(
    ("read", "environ", "message"),
    [
        (settings.timeout, {"HPCDIST_TIMEOUT": "soon"}, "HPCDIST_TIMEOUT='soon' is not a number of seconds; set e.g."),
        (settings.timeout, {"HPCDIST_TIMEOUT": "0"}, "HPCDIST_TIMEOUT='0' must be a positive number of seconds"),
        (
            settings.startup_timeout,
            {"HPCDIST_STARTUP_TIMEOUT": "1m"},
            "HPCDIST_STARTUP_TIMEOUT='1m' is not a number of seconds; set e.g. HPCDIST_STARTUP_TIMEOUT=600",
        ),
        (settings.store, {"HPCDIST_STORE": "redis"}, "unknown store 'redis'; choose one of auto, tcp, mpi (store= or"),
        (settings.heartbeat_timeout, {"HPCDIST_HEARTBEAT_TIMEOUT": "-1"}, "HPCDIST_HEARTBEAT_TIMEOUT='-1' must be"),
        (settings.kill_wait, {"HPCDIST_KILL_WAIT": "soon"}, "HPCDIST_KILL_WAIT='soon' must be a positive number"),
        (settings.template_dir, {"HPCDIST_TEMPLATE_DIR": "/no/such"}, "$HPCDIST_TEMPLATE_DIR '/no/such' is not a"),
        (settings.mpi_build_wait, {"HPCDIST_MPI_BUILD_WAIT": "0"}, "$HPCDIST_MPI_BUILD_WAIT='0' is not a positive"),
        (settings.mpi_native, {"HPCDIST_MPI_NATIVE": "yes"}, "$HPCDIST_MPI_NATIVE='yes' is not one of auto, 1, 0"),
        (settings.mpi_sanitizer, {"HPCDIST_MPI_SANITIZER": "msan"}, "$HPCDIST_MPI_SANITIZER='msan' is not one of tsan"),
        (settings.mpi_ring_bytes, {"HPCDIST_MPI_RING_BYTES": "1k"}, "HPCDIST_MPI_RING_BYTES='1k' is not a whole"),
    ],
)
def test_a_setting_of_the_wrong_kind_is_a_usage_error_naming_it(read, environ: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        read(environ)
    assert str(raised.value).startswith(message)


def test_the_settings_page_lists_every_setting_and_the_contract_s_variables() -> None:
    hook = PACKAGE.parent / "docs" / "hooks" / "settings_reference.py"
    spec = importlib.util.spec_from_file_location("settings_reference", hook)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = module.render()
    assert all(f"| `{s.name}` |" in page for s in settingtable.SETTINGS)
    assert all(f"`{name}`" in page for name in RankContract.VARIABLES.values())


def test_a_rank_reads_its_contract_once_and_the_progress_flag_keeps_its_third_state(monkeypatch) -> None:
    from hpcdist.runtime import process

    contract = RankContract.from_environ({"HPCDIST_PROGRESS": "0"})
    assert contract.progress is False and RankContract().progress is None
    assert contract.environ() == {"HPCDIST_PROGRESS": "0"}
    with pytest.raises(UsageError, match=r"^HPCDIST_PROGRESS='yes': set it to 1 or 0"):
        RankContract.from_environ({"HPCDIST_PROGRESS": "yes"})
    monkeypatch.setattr(process, "_PROCESS", [])  # a fresh process
    assert process.existing() is None
    made = process.current({"HPCDIST_ON_FAILURE": "shrink"})
    assert made.contract.shrinks and process.existing() is made
    assert process.current({"HPCDIST_ON_FAILURE": "end"}) is made  # read once: a later environment is not read


def test_a_rank_of_another_hpcdist_refuses_to_start_and_tells_its_launcher(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env = {name: value for name, value in os.environ.items() if not name.startswith("HPCDIST_")}
    env |= {"HPCDIST_VERSION": "9.9.9", "HPCDIST_CONTROL": TOKEN}
    program = ["python", "-c", f"open({str(marker)!r}, 'w')"]
    done = subprocess.run(
        [sys.executable, "-m", "hpcdist.worker", "--", *program], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and not marker.exists()
    told = parse_event(done.stderr, TOKEN)
    assert isinstance(told, Usage) and told.rank == 0
    assert told.message.startswith(
        f"rank 0 on {socket.gethostname()}: the launcher runs hpcdist 9.9.9 but this rank has hpcdist "
        f"{hpcdist.__version__}; install hpcdist 9.9.9"
    )


def test_a_world_mpi_does_not_share_is_refused_with_one_message_naming_both() -> None:
    from hpcdist.errors import check_same_world

    check_same_world("the slurm launch", (3, 4), (3, 4))
    with pytest.raises(UsageError) as raised:
        check_same_world("the slurm launch", (3, 4), (0, 1))
    assert str(raised.value).startswith(
        "the slurm launch says this process is rank 3 of 4 but MPI says rank 0 of 1: mpi4py's MPI is not the one "
        "that started the job (srun --mpi=pmi2 with Open MPI 5 starts every task alone in a world of 1"
    )


def test_a_dry_run_s_placeholder_token_reads_as_no_launcher_listening() -> None:
    from hpcdist.contract import DRY_RUN_TOKEN, NUMBERED

    contract = RankContract.from_environ({"HPCDIST_CONTROL": DRY_RUN_TOKEN, "HPCDIST_TAG": NUMBERED})
    assert (contract.token, contract.routed, contract.tag) == (None, False, "1")
    with pytest.raises(UsageError, match="must not be set by hand"):
        RankContract.from_environ({"HPCDIST_CONTROL": "<another token>"})
