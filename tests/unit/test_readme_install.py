"""The README's install takes torch's CPU wheel and keeps it, tried offline with pip's own resolver against two local
indexes: one standing for PyPI (a newer torch, as PyPI's CUDA build is), one for torch's CPU index (an older
`+cpu`). No pip configuration is read (PIP_CONFIG_FILE=/dev/null, no PIP_* variables): this machine's pip has its own.
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
NEWER, CPU = "2.14.1", "2.13.0+cpu"


def wheel(directory: Path, version: str) -> Path:
    """A torch wheel of `version` (a package with nothing in it: only its metadata matters to the resolver)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("torch/__init__.py", "")
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")
    return path


def index(root: Path, version: str) -> str:
    """A PEP 503 simple index under `root` serving one torch wheel of `version`; its URL."""
    found = wheel(root / "files", version)
    page = root / "simple" / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="../../files/{found.name}">{found.name}</a>\n')
    return (root / "simple").as_uri()


def pip(args: list[str], pypi: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m pip ARGS` with no configuration but `pypi` as the default index (PyPI's place)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=pypi, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def resolved(install_line: str, pypi: str, cpu: str, tmp_path: Path) -> list[str]:
    """The torch versions pip would install for `install_line` (a README line, CPU index URL replaced by `cpu`)."""
    argv = shlex.split(install_line.replace(CPU_INDEX, cpu), comments=True)
    assert argv[:2] == ["pip", "install"], install_line
    report = tmp_path / "report.json"
    done = pip([*argv[1:], "--dry-run", "--ignore-installed", "--report", str(report), "-q"], pypi, tmp_path)
    assert done.returncode == 0, done.stderr
    return [item["metadata"]["version"] for item in json.loads(report.read_text())["install"]]


def readme_install_lines() -> list[str]:
    """The `pip install` lines of the README's install block."""
    text = (ROOT / "README.md").read_text()
    block = text[text.index("## Install") :].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith("pip install")]


def test_the_readme_s_torch_line_takes_the_cpu_wheel_when_pypi_has_a_newer_torch(tmp_path: Path) -> None:
    pypi, cpu = index(tmp_path / "pypi", NEWER), index(tmp_path / "cpu", CPU)
    torch_line, hpcdist_line = readme_install_lines()
    assert CPU_INDEX in torch_line and "hpcdist" in hpcdist_line
    assert resolved(torch_line, pypi, cpu, tmp_path) == [CPU]
    # what the README said before, and what the check is for: pip takes the newest torch of both indexes
    assert resolved(f"pip install torch --extra-index-url {CPU_INDEX}", pypi, cpu, tmp_path) == [NEWER]


def test_hpcdist_s_own_torch_requirement_keeps_the_cpu_wheel_once_installed(tmp_path: Path) -> None:
    pypi, cpu = index(tmp_path / "pypi", NEWER), index(tmp_path / "cpu", CPU)
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    (torch,) = [r.strip() for r in config["options"]["install_requires"].splitlines() if r.strip().startswith("torch")]
    venv = tmp_path / "venv"  # the user's, after the README's first line; pip drives it from outside (--python)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = ["--python", str(venv / "bin" / "python")]
    installed = pip([*python, "install", "-q", "--index-url", cpu, "torch"], pypi, tmp_path)
    assert installed.returncode == 0, installed.stderr
    report = tmp_path / "report.json"
    kept = pip([*python, "install", "--dry-run", "--report", str(report), "-q", torch], pypi, tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert json.loads(report.read_text())["install"] == []
    # and the check can tell: where the installed torch is too old for the requirement, pip replaces it
    newer = pip([*python, "install", "--dry-run", "--report", str(report), "-q", "torch>=2.14"], pypi, tmp_path)
    assert newer.returncode == 0, newer.stderr
    assert [item["metadata"]["version"] for item in json.loads(report.read_text())["install"]] == [NEWER]
