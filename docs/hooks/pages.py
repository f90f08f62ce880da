"""MkDocs hook: a user page reads in about ten minutes and in the user's words: a page whose prose (code blocks left
out) runs over MOST_WORDS words, or a user page (any outside contributing/) that uses one of hpcdist's internal terms,
is a warning naming the page, which fails the strict build."""

from __future__ import annotations

import logging
import re
from html.parser import HTMLParser
from typing import Any

_LOG = logging.getLogger("mkdocs.plugins.hpcdist.pages")
MOST_WORDS = 3000
# hpcdist's own names for its parts, which a PyTorch or MPI user does not know; the contributors' pages may use them
INTERNAL = re.compile(r"\b(shims?|ledgers?|taggers?|control lines?|casualt(?:y|ies))\b", re.IGNORECASE)
CONTRIBUTORS = "contributing/"


class _Text(HTMLParser):
    """A page's text: all of it, and its prose alone (outside <pre>, the code blocks)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.all: list[str] = []
        self.prose: list[str] = []
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Enter a code block."""
        self._pre += tag == "pre"

    def handle_endtag(self, tag: str) -> None:
        """Leave a code block."""
        self._pre -= tag == "pre" and self._pre > 0

    def handle_data(self, data: str) -> None:
        """Text, kept as prose outside code blocks."""
        self.all.append(data)
        if not self._pre:
            self.prose.append(data)


def problems(html: str, src_path: str) -> list[str]:
    """What keeps the page at `src_path`, rendered as `html`, from reading as a user page should."""
    text = _Text()
    text.feed(html)
    text.close()
    found = []
    words = len(" ".join(text.prose).split())
    if words > MOST_WORDS:
        found.append(f"{words} words of prose, more than {MOST_WORDS}; move measurements and details to their own page")
    if not src_path.startswith(CONTRIBUTORS):
        terms = sorted({match.group(1).lower() for match in INTERNAL.finditer(" ".join(text.all))})
        if terms:
            found.append(f"uses hpcdist's internal terms {', '.join(terms)}; say what the user knows instead")
    return found


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    """Warn (an error under --strict) where a page is too long or speaks hpcdist's own words."""
    for problem in problems(html, page.file.src_path):
        _LOG.warning("%s: %s", page.file.src_path, problem)
    return html
