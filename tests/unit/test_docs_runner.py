"""The docs' example runner (tests/doc_examples.py, tests/doc_runner.py) on small markdown texts: placeholders,
diffs, exit statuses, markers, files, snippets and hangs."""

from __future__ import annotations

from pathlib import Path

import doc_runner
import pytest
from doc_examples import Block, ExampleError, matches, parse
from doc_runner import ExampleFailed, Run, newcomer_env

FENCE = "```"


def md(*lines: str) -> str:
    """A markdown text from its lines (``` written as FENCE keeps this file's own blocks apart)."""
    return "\n".join(lines).replace("FENCE", FENCE) + "\n"


def run_all(tmp_path: Path, text: str) -> Run:
    """Parse `text` as page.md and run every block of the docs tier in a working directory under tmp_path."""
    page = tmp_path / "page.md"
    page.write_text(text)
    workdir = tmp_path / "work"
    workdir.mkdir()
    blocks = parse(page, strict=True)
    run = Run(blocks, workdir, newcomer_env(Path(doc_runner.sys.prefix)), lambda argv: argv, "docs")
    for block in blocks:
        run.upto(block)
    return run


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (["ranks: <n>"], ["ranks: 4"], True),
        (["ranks: <n>"], ["ranks: abc"], False),
        (["ranks: <n>"], ["ranks: 4 of 8"], False),
        (["took <seconds> s"], ["took 1.25 s"], True),
        (["took <seconds> s"], ["took fast s"], False),
        (["on <host>:<port>"], ["on n1:29500"], True),
        (["on <host>:<port>"], ["on n1 :29500"], False),
        (["wrote <path>"], ["wrote /tmp/x y"], False),
        (["wrote <path>"], ["wrote /tmp/a-b/c.json"], True),
        (["error: <...>, see"], ["error: anything at all, see"], True),
        (["error: <...>, see"], ["error: anything", "see"], False),
        (["first", "...", "last"], ["first", "a", "b", "c", "last"], True),
        (["first", "...", "last"], ["first", "last"], True),
        (["first", "...", "last"], ["first", "a", "last", "more"], False),
        (["...", "last"], ["last", "x", "last"], True),
        (["exact"], ["exact   "], True),
        (["exact"], ["exact", "extra"], False),
        ([], [], True),
        ([], ["something"], False),
        (["a.b"], ["aXb"], False),
    ],
)
def test_placeholders_match_what_they_should_and_no_more(expected: list[str], actual: list[str], ok: bool) -> None:
    assert matches(expected, actual) is ok


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (["rank <n>: 1", "rank <n>: 0"], ["rank 0: 0", "rank 1: 1"], True),
        (["rank 0", "rank 1"], ["rank 1", "rank 0"], True),
        (["rank 0", "rank 1"], ["rank 1", "rank 1"], False),
        (["rank 0", "rank 1"], ["rank 1", "rank 0", "rank 2"], False),
        (["rank 0", "..."], ["rank 1", "rank 0", "rank 2"], True),
    ],
)
def test_unordered_matches_each_line_once(expected: list[str], actual: list[str], ok: bool) -> None:
    assert matches(expected, actual, unordered=True) is ok


def test_matching_output_and_status_pass(tmp_path: Path) -> None:
    run_all(
        tmp_path,
        md(
            "FENCEconsole",
            "$ echo hello; echo world >&2",
            "hello",
            "world",
            "$ echo 'hpcdist: error: bad, here, fix it' >&2; exit 2",
            "hpcdist: error: bad, here, fix it",
            "$ exit 3  # exit 3",
            "$ echo one \\",
            "  two",
            "one two",
            "FENCE",
        ),
    )


def test_wrong_output_fails_with_a_diff(tmp_path: Path) -> None:
    with pytest.raises(ExampleFailed) as failed:
        run_all(tmp_path, md("Intro.", "", "FENCEconsole", "$ echo hello", "bye", "FENCE"))
    message = str(failed.value)
    assert message.splitlines()[0] == f"{tmp_path / 'page.md'}:4: $ echo hello"
    assert "-bye" in message.splitlines()
    assert "+hello" in message.splitlines()


@pytest.mark.parametrize(
    ("command", "output", "says"),
    [
        ("false", "", "exit status 1, expected 0 (no error is shown and there is no `# exit N`)"),
        ("echo 'hpcdist: error: x' >&2", "hpcdist: error: x", "exit status 0, expected 2 (an `hpcdist: error:`"),
        ("exit 1  # exit 3", "", "exit status 1, expected 3 (`# exit N` ends the command)"),
    ],
)
def test_unexpected_exit_status_fails(tmp_path: Path, command: str, output: str, says: str) -> None:
    with pytest.raises(ExampleFailed, match="exit status") as failed:
        run_all(tmp_path, md("FENCEconsole", f"$ {command}", output, "FENCE"))
    assert says in str(failed.value)


@pytest.mark.parametrize(
    ("marker", "refused"),
    [
        ("<!-- example: skip -->", "a skip needs its reason"),
        ('<!-- example: skip "" -->', "a skip needs its reason"),
        ("<!-- example: tier=moon -->", "unknown marker word 'tier=moon'"),
        ("<!-- example: sometimes -->", "unknown marker word 'sometimes'"),
    ],
)
def test_bad_markers_are_refused(tmp_path: Path, marker: str, refused: str) -> None:
    page = tmp_path / "page.md"
    with pytest.raises(ExampleError, match=refused):
        parse(page, md("Text.", marker, "FENCEconsole", "$ true", "FENCE"), strict=False)


def test_marker_must_touch_its_block(tmp_path: Path) -> None:
    with pytest.raises(ExampleError, match=r"page.md:1: the marker .* is not on the line right before"):
        parse(tmp_path / "page.md", md("<!-- example: tier=hosts -->", "", "FENCEconsole", "$ true", "FENCE"))


def test_markers_set_tier_skip_and_order(tmp_path: Path) -> None:
    blocks = parse(
        tmp_path / "page.md",
        md(
            "<!-- example: tier=cluster unordered -->",
            "FENCEconsole",
            "$ sbatch job.sh",
            "FENCE",
            '<!-- example: skip "needs an NVIDIA GPU" -->',
            "FENCEconsole",
            "$ nvidia-smi",
            "FENCE",
            "FENCEconsole",
            "$ true",
            "FENCE",
        ),
    )
    assert [(b.tier, b.unordered, b.skip, b.runs) for b in blocks] == [
        ("cluster", True, "", True),
        ("docs", False, "needs an NVIDIA GPU", False),
        ("docs", False, "", True),
    ]


def test_unknown_language_fails_under_ci_only(tmp_path: Path) -> None:
    text = md("FENCE", "plain", "FENCE", "FENCEfortran", "x", "FENCE")
    with pytest.raises(ExampleError, match=r"page.md:1: unknown language '\(none\)'"):
        parse(tmp_path / "page.md", text, strict=True)
    assert [b.kind for b in parse(tmp_path / "page.md", text, strict=False)] == ["shown", "shown"]


@pytest.mark.parametrize(
    ("block", "refused"),
    [
        (("FENCEconsole", "FENCE"), "a console block without a `\\$ ` command"),
        (("FENCEconsole", "output only", "FENCE"), "a console block starts with a `\\$ ` command, not 'output only'"),
        (('FENCEconsole title="Terminal"', "$ true", "FENCE"), "a console block with title= would be written"),
    ],
)
def test_console_blocks_that_would_check_nothing_are_refused(
    tmp_path: Path, block: tuple[str, ...], refused: str
) -> None:
    with pytest.raises(ExampleError, match=refused):
        parse(tmp_path / "page.md", md(*block))


def test_title_must_stay_in_the_working_directory(tmp_path: Path) -> None:
    for title in ("/etc/x", "../x", "~/.bashrc"):
        with pytest.raises(ExampleError, match="must be a relative path"):
            parse(tmp_path / "page.md", md(f'FENCEtext title="{title}"', "x", "FENCE"))


def test_files_and_snippets_run_in_order_in_the_working_directory(tmp_path: Path) -> None:
    run = run_all(
        tmp_path,
        md(
            'FENCEpython title="pkg/hello.py"',
            "print('hello from', __name__)",
            "FENCE",
            'FENCEtext title="hostfile"',
            "n1 slots=2",
            "FENCE",
            "FENCEconsole",
            "$ python pkg/hello.py && cat hostfile",
            "hello from __main__",
            "n1 slots=2",
            "FENCE",
            "FENCEpython",
            "import os",
            "value = open('hostfile').read().split()[0]",
            "FENCE",
            "FENCEpython",
            "assert value == 'n1'",
            "home = os.environ['VIRTUAL_ENV']",
            "FENCE",
        ),
    )
    assert run.namespace["value"] == "n1"
    assert run.namespace["home"] == doc_runner.sys.prefix


def test_a_failing_snippet_names_its_line(tmp_path: Path) -> None:
    with pytest.raises(AssertionError) as failed:
        run_all(tmp_path, md("FENCEpython", "x = 1", "assert x == 2, 'x is not 2'", "FENCE"))
    assert failed.traceback[-1].lineno + 1 == 3  # the assert's line in page.md


def test_a_hang_is_killed_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doc_runner, "TIMEOUT", 0.5)
    with pytest.raises(ExampleFailed, match=r"page.md:2: `echo started; sleep 30` still ran after 0.5 s") as failed:
        run_all(tmp_path, md("FENCEconsole", "$ echo started; sleep 30", "FENCE"))
    assert failed.value.args[0].endswith("started\n")


def test_after_a_failure_the_rest_runs_and_names_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(md("FENCEconsole", "$ false", "FENCE", "FENCEconsole", "$ touch later; false", "FENCE"))
    workdir = tmp_path / "work"
    workdir.mkdir()
    blocks = parse(page)
    run = Run(blocks, workdir, newcomer_env(Path(doc_runner.sys.prefix)), lambda argv: argv, "docs")
    with pytest.raises(ExampleFailed, match="exit status 1") as first:
        run.upto(blocks[0])
    assert "failed before it" not in str(first.value)
    with pytest.raises(ExampleFailed, match=r"(?s)page.md:5: \$ touch later.*the example at .*page.md:1 failed before"):
        run.upto(blocks[1])
    assert (workdir / "later").exists()


def test_a_tier_runs_only_its_examples_but_writes_every_file(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        md(
            'FENCEbash title="job.sh"',
            "echo job",
            "FENCE",
            "FENCEconsole",
            "$ touch untagged",
            "FENCE",
            "<!-- example: tier=cluster -->",
            "FENCEconsole",
            "$ ls",
            "job.sh",
            "FENCE",
        )
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    blocks: list[Block] = parse(page)
    Run(blocks, workdir, newcomer_env(Path(doc_runner.sys.prefix)), lambda argv: argv, "cluster").upto(blocks[2])
    assert sorted(p.name for p in workdir.iterdir()) == ["job.sh"]


def test_the_environment_is_a_newcomers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCDIST_TIMEOUT", "5")
    env = newcomer_env(tmp_path / "venv")
    assert env["PATH"].split(":")[0] == str(tmp_path / "venv" / "bin")
    assert "HPCDIST_TIMEOUT" not in env
    assert not any(name.startswith(("SLURM_", "PYTEST_", "CI")) for name in env)


def test_inline_and_nested_fences_are_not_blocks(tmp_path: Path) -> None:
    blocks = parse(
        tmp_path / "page.md",
        md(
            "- ```` FENCEconsole ````: inline code in a list item, not a fence",
            "````markdown",
            "FENCEconsole",
            "$ shown only",
            "FENCE",
            "````",
            "FENCEconsole",
            "$ true",
            "FENCE",
        ),
        strict=True,
    )
    assert [(b.line, b.kind, b.language) for b in blocks] == [(2, "shown", "markdown"), (7, "console", "console")]


def test_in_a_tier_a_snippet_is_its_own_process(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        md(
            "<!-- example: tier=hosts -->",
            "FENCEpython",
            "import os, pathlib",
            "pathlib.Path('cwd').write_text(os.getcwd())",
            "FENCE",
            "<!-- example: tier=hosts -->",
            "FENCEpython",
            "raise SystemExit('no ' + 'luck')",
            "FENCE",
        )
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    blocks = parse(page)
    run = Run(blocks, workdir, newcomer_env(Path(doc_runner.sys.prefix)), lambda argv: argv, "hosts")
    run.upto(blocks[0])
    assert (workdir / "cwd").read_text() == str(workdir)
    assert "os" not in run.namespace
    with pytest.raises(ExampleFailed, match=r"page.md:7: the python snippet failed \(exit 1\):\nno luck"):
        run.upto(blocks[1])


def test_each_working_directory_links_the_mpich_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mpich = tmp_path / "some-mpich-venv"
    (mpich / "bin").mkdir(parents=True)
    (mpich / "bin" / "mpiexec").write_text("#!/bin/sh\n")
    monkeypatch.setenv("HPCDIST_MPICH_VENV", str(mpich))
    page = tmp_path / "page.md"
    page.write_text(md("FENCEconsole", "$ ls venv-mpich/bin", "mpiexec", "FENCE"))
    block = parse(page, strict=True)[0]
    for run_for in doc_runner.runs(lambda argv: argv, "docs"):  # one factory, its directories removed after
        run = run_for(block)
        run.upto(block)
        assert (run.workdir / "venv-mpich").resolve() == mpich.resolve()
