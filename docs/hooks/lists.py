"""MkDocs hook: a list that renders as a paragraph with a literal "- " or "1. " (no blank line before it) is a warning
naming the page and the item, which fails the strict build (every page's are said first)."""

from __future__ import annotations

import logging
import re
from html.parser import HTMLParser
from typing import Any

_LOG = logging.getLogger("mkdocs.plugins.hpcdist.lists")
# A paragraph line that begins like a list item: "- x", "* x", "+ x", "1. x" (Python-Markdown has no "1)" lists)
_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}\.)\s+\S")


class _Paragraphs(HTMLParser):
    """The text of each <p> of a page's HTML, code and inline markup flattened into it, line breaks kept."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self._open: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Begin collecting at a paragraph."""
        if tag == "p":
            self._open = []

    def handle_endtag(self, tag: str) -> None:
        """Keep a paragraph's text at its end."""
        if tag == "p" and self._open is not None:
            self.texts.append("".join(self._open))
            self._open = None

    def handle_data(self, data: str) -> None:
        """Text inside a paragraph."""
        if self._open is not None:
            self._open.append(data)


def run_on_lists(html: str) -> list[str]:
    """The first line of each list item that `html` shows inside a paragraph instead of as a list."""
    parser = _Paragraphs()
    parser.feed(html)
    parser.close()
    found = []
    for text in parser.texts:
        lines = text.split("\n")
        found += [line.strip() for line in lines[1:] if _ITEM.match(line)]
    return found


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    """Warn (an error under --strict) where a page's list did not render as one."""
    for item in run_on_lists(html):
        _LOG.warning(
            "%s: a list renders as a paragraph at %r; put a blank line before the list", page.file.src_path, item
        )
    return html
