"""The docs site's MkDocs hooks on small pages: lists that render as paragraphs are found, and a reference page's
marker is replaced only where it stands alone on its line."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

import markdown
import pytest

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks"


def hook(name: str) -> ModuleType:
    """The hook module docs/hooks/NAME.py, loaded as MkDocs loads it (by path)."""
    spec = importlib.util.spec_from_file_location(name, HOOKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered(text: str) -> str:
    """`text` as the site's Markdown (Python-Markdown) renders it."""
    return markdown.markdown(text)


def test_a_list_without_a_blank_line_before_it_is_found_and_one_with_it_is_not() -> None:
    lists = hook("lists")
    run_on = "Every rank goes through:\n- its tagger\n- its contract\n\n1. first\n\nThen:\n1. one\n2. two\n"
    assert lists.run_on_lists(rendered(run_on)) == ["- its tagger", "- its contract", "1. one", "2. two"]
    fine = "Every rank goes through:\n\n- its tagger\n- its contract\n\nA line that ends in a number\n300 s later.\n"
    assert lists.run_on_lists(rendered(fine)) == []


@pytest.mark.parametrize(
    ("name", "text", "warning"),
    [
        (
            "lists",
            "Every rank goes through a small shim:\n- the tagger\n",
            "mpirun.md: a list renders as a paragraph at '- the tagger'; put a blank line before the list",
        ),
        (
            "pages",
            "Every rank goes through a small shim.\n",
            "mpirun.md: uses hpcdist's internal terms shim; say what the user knows instead",
        ),
    ],
)
def test_a_hook_s_finding_is_a_warning_naming_the_page(
    name: str, text: str, warning: str, caplog: pytest.LogCaptureFixture
) -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_path="mpirun.md"))
    html = rendered(text)
    assert hook(name).on_page_content(html, page=page) == html
    assert [r.getMessage() for r in caplog.records] == [warning]


@pytest.mark.parametrize("name", ["cli_reference", "settings_reference"])
def test_a_reference_marker_is_replaced_alone_on_its_line_and_left_as_text_in_a_sentence(name: str) -> None:
    module = hook(name)
    quoted = f"The hook replaces the page's `{module.MARKER}` marker with the tables.\n"
    assert module.on_page_markdown(quoted, page=None) == quoted
    page = module.on_page_markdown(f"# Reference\n\n{module.MARKER}\n", page=None)
    assert module.MARKER not in page and page.startswith("# Reference\n\n") and len(page) > 1000


def test_a_page_over_the_word_limit_is_found_with_its_code_blocks_left_out() -> None:
    pages = hook("pages")
    prose = " ".join(["word"] * pages.MOST_WORDS)
    code = "\n\n" + "    $ hpcdist mpirun -np 2 -- python train.py\n" * 500  # an indented code block: <pre>
    assert pages.problems(rendered(prose + code), "mpirun.md") == []
    (problem,) = pages.problems(rendered(prose + " more" + code), "mpirun.md")
    assert problem.startswith(f"{pages.MOST_WORDS + 1} words of prose, more than {pages.MOST_WORDS}")


@pytest.mark.parametrize("term", ["shim", "Ledger", "taggers", "control line", "casualty"])
def test_an_internal_term_is_found_on_a_user_page_and_allowed_on_a_contributors_page(term: str) -> None:
    pages = hook("pages")
    html = rendered(f"Each rank starts in the {term} first.\n\n    {term}\n")
    (problem,) = pages.problems(html, "failures.md")
    assert f"uses hpcdist's internal terms {term.lower()}" in problem
    assert pages.problems(html, "contributing/architecture.md") == []
    assert (
        pages.problems(rendered("hpcdist.worker wraps each rank; shimmer and ledgerline are other words."), "a.md")
        == []
    )
