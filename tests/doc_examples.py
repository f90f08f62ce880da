"""The examples of README.md and docs/**/*.md: their blocks, parsed with Sybil, and how output is matched.

How they run: tests/doc_runner.py. The conventions (the writer's side: docs/contributing/testing.md):
- ```` ```console ````: `$ ` lines are commands (a trailing `\\` continues one), the lines up to the next `$ ` its
  expected output. A command runs under bash, stdout and stderr into one pipe; its exit status must be the one the
  text implies: `# exit N` ending the command, else 2 when an `hpcdist: error:` line is shown, else 0.
- A block with `title="PATH"` (any language) is a FILE written there; an untitled ```` ```python ```` block is a
  SNIPPET executed in the document's one namespace; the languages of SHOWN are only shown.
- `<!-- example: WORDS -->` on the line before a block: `tier=cluster`, `tier=hosts`,
  `tier=containers`, `skip "reason"`, `unordered`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sybil import Document, Example
from sybil.parsers.markdown.lexers import FENCE, RawFencedCodeBlockLexer
from sybil.region import Region

ROOT = Path(__file__).resolve().parents[1]
TIERS = ("docs", "cluster", "hosts", "containers")
# languages that are only shown
SHOWN = frozenset(
    {"bash", "sh", "shell", "text", "ini", "yaml", "toml", "json", "cfg", "conf", "diff", "jinja", "c", "cpp"}
    | {"makefile", "dockerfile", "mermaid", "markdown", "md"}
)
_INFO = re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_MARKER = re.compile(r"^[ \t]*<!--\s*example:(?P<words>.*?)-->[ \t]*\n", re.MULTILINE)
_MARKER_WORD = re.compile(r'\s*(tier=\w+|skip(?:\s+"[^"]*")?|unordered|\S+)')
EXIT_COMMENT = re.compile(r"#\s*exit\s+(\d+)\s*$")
_PLACEHOLDERS = {
    "<host>": r"[A-Za-z0-9][A-Za-z0-9.\-]*",
    "<port>": r"\d{1,5}",
    "<seconds>": r"\d+(?:\.\d+)?",
    "<path>": r"\S+",
    "<pid>": r"\d+",
    "<n>": r"\d+",
    "<...>": r".*?",
}
_PLACEHOLDER = re.compile("|".join(re.escape(name) for name in _PLACEHOLDERS))


class _FenceLexer(RawFencedCodeBlockLexer):
    """Sybil's fenced-block lexer, minus what CommonMark does not take for a fence: a backtick fence whose info
    string holds a backtick (```` ```console ```` written inline in a list item is inline code)."""

    def __call__(self, document: Document) -> Iterator[Region]:
        open_blocks: list[re.Match[str]] = []
        for match in FENCE.finditer(document.text):
            if match.group("fence")[0] == "`" and "`" in match.group("trailing"):
                continue
            for i, existing in enumerate(open_blocks):
                if self.match_closes_existing(match, existing):
                    region = self.make_region(existing, document, match)
                    if region is not None:
                        yield region
                    open_blocks = open_blocks[:i]
                    break
            else:
                open_blocks.append(match)
        if open_blocks:
            region = self.make_region(open_blocks[0], document, closing=None)
            if region is not None:
                yield region


class ExampleError(Exception):
    """A block or marker the runner cannot run as written; the message names FILE:LINE."""


@dataclass(frozen=True)
class Command:
    """One `$ ` command of a console block: its text, the output it must print, the exit status it must end with."""

    line: int
    text: str
    expected: tuple[str, ...]
    status: int


@dataclass(frozen=True)
class Block:
    """One fenced block of a document: what it is (console, snippet, file, shown), where, and its marker."""

    path: Path
    line: int
    kind: str  # "console", "snippet", "file", "shown"
    source: str
    language: str
    title: str = ""
    tier: str = "docs"
    skip: str = ""  # the reason, for a block shown but not run
    unordered: bool = False
    commands: tuple[Command, ...] = ()
    example: Example | None = field(default=None, compare=False, repr=False)

    @property
    def where(self) -> str:
        """FILE:LINE of the block's opening fence, relative to the checkout."""
        return f"{relative(self.path)}:{self.line}"

    @property
    def runs(self) -> bool:
        """Whether some tier executes or writes this block."""
        return self.kind != "shown" and not self.skip


def relative(path: Path) -> str:
    """A path relative to the checkout when it lies inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def documents() -> list[Path]:
    """README.md and docs/**/*.md of the checkout, in a fixed order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def parse(path: Path, text: str | None = None, strict: bool | None = None) -> list[Block]:
    """The blocks of one markdown document, in order. Raises ExampleError on a bad marker or title, and (strict,
    the default under CI=true) on a block whose language this runner does not know."""
    strict = os.environ.get("CI", "").lower() == "true" if strict is None else strict
    document = Document(path.read_text() if text is None else text, str(path))
    end = -1
    for region in sorted(_FenceLexer(info_pattern=_INFO)(document), key=lambda r: r.start):
        if region.start >= end:  # a fence shown inside another block is part of that block
            document.add(region)
            end = region.end
    markers = {m.end(): m for m in _MARKER.finditer(document.text)}
    blocks, used, errors = [], set(), []
    for example in document.examples():
        marker = markers.get(example.region.start)
        if marker is not None:
            used.add(marker.end())
        try:
            blocks.append(_block(path, example, marker, strict))
        except ExampleError as exc:
            errors.append(str(exc))
    for end, marker in markers.items():
        if end not in used:
            line = document.text.count("\n", 0, marker.start()) + 1
            errors.append(
                f"{relative(path)}:{line}: the marker {marker.group(0).strip()!r} is not on the line right before "
                "a fenced block: move it there, or remove it"
            )
    if errors:
        raise ExampleError("\n".join(errors))
    return blocks


def _block(path: Path, example: Example, marker: re.Match[str] | None, strict: bool) -> Block:
    """A Block from a lexed fenced region and the marker before it."""
    where = f"{relative(path)}:{example.line}"
    info = example.region.lexemes["info"].strip()
    language = info.split()[0].lstrip(".{") if info else ""
    title = dict(_ATTR.findall(info)).get("title", "")
    example.parsed = example.region.lexemes["source"]
    source = str(example.parsed)
    tier, skip, unordered = "docs", "", False
    for word in _MARKER_WORD.findall(marker.group("words")) if marker else ():
        if word.startswith("tier=") and word[5:] in TIERS[1:]:
            tier = word[5:]
        elif word.startswith("skip"):
            skip = word[4:].strip().strip('"').strip()
            if not skip:
                raise ExampleError(f'{where}: a skip needs its reason: <!-- example: skip "needs an NVIDIA GPU" -->')
        elif word == "unordered":
            unordered = True
        else:
            raise ExampleError(
                f"{where}: unknown marker word {word!r}: use tier=cluster, tier=hosts, tier=containers, "
                'skip "reason" or unordered'
            )
    if title:
        if language == "console":
            raise ExampleError(
                f"{where}: a console block with title= would be written to a file, not run: drop the title"
            )
        if title.startswith(("/", "~")) or ".." in Path(title).parts:
            raise ExampleError(f"{where}: title={title!r} must be a relative path inside the working directory")
        kind = "file"
    elif language == "console":
        kind = "console"
    elif language == "python":
        kind = "snippet"
    elif language in SHOWN or not strict:
        kind = "shown"
    else:
        raise ExampleError(
            f"{where}: unknown language {language or '(none)'!r} (CI=true): tag it console or python to run it, "
            "text (or bash, yaml, ini...) to show it"
        )
    if kind == "shown" and marker is not None and (tier != "docs" or unordered):
        raise ExampleError(f"{where}: a {language!r} block is only shown: its marker {marker.group(0).strip()!r} "
                           "would do nothing")  # fmt: skip
    commands = _commands(source, example.line + 1, where) if kind == "console" else ()
    return Block(path, example.line, kind, source, language, title, tier, skip, unordered, commands, example)


def _commands(source: str, first_line: int, where: str) -> tuple[Command, ...]:
    """The `$ ` commands of a console block's text, each with its expected output and exit status."""
    commands: list[Command] = []
    lines = source.splitlines()
    index = 0
    while index < len(lines) and not lines[index].strip():
        index += 1
    while index < len(lines):
        if not lines[index].startswith("$ "):
            raise ExampleError(f"{where}: a console block starts with a `$ ` command, not {lines[index]!r}")
        line, text = first_line + index, [lines[index][2:]]
        while text[-1].endswith("\\") and index + 1 < len(lines):
            index += 1
            text.append(lines[index])
        index += 1
        expected = []
        while index < len(lines) and not lines[index].startswith("$ "):
            expected.append(lines[index].rstrip())
            index += 1
        while expected and not expected[-1]:
            expected.pop()
        exit_comment = EXIT_COMMENT.search(text[-1])
        status = int(exit_comment.group(1)) if exit_comment else 2 if _shows_error(expected) else 0
        commands.append(Command(line, "\n".join(text), tuple(expected), status))
    if not commands:
        raise ExampleError(f"{where}: a console block without a `$ ` command checks nothing: add one, or tag it text")
    return tuple(commands)


def _shows_error(expected: list[str]) -> bool:
    """Whether the expected output shows an hpcdist error line."""
    return any(line.startswith("hpcdist: error:") for line in expected)


def collect(tier: str) -> list[Block]:
    """The blocks that `tier` runs, of every document, in order: its own examples (skipped ones aside). Raises
    ExampleError with every problem of every document."""
    blocks, errors = [], []
    for path in documents():
        try:
            blocks += [block for block in parse(path) if block.runs and block.tier == tier]
        except ExampleError as exc:
            errors.append(str(exc))
    if errors:
        raise ExampleError("\n".join(errors))
    return blocks


def _line_pattern(line: str) -> re.Pattern[str]:
    """The regex an expected line compiles to: its placeholders as patterns, everything else literal."""
    parts, last = [], 0
    for match in _PLACEHOLDER.finditer(line):
        parts += [re.escape(line[last : match.start()]), _PLACEHOLDERS[match.group(0)]]
        last = match.end()
    parts.append(re.escape(line[last:]))
    return re.compile("".join(parts) + r"\Z")


def matches(expected: list[str] | tuple[str, ...], actual: list[str], unordered: bool = False) -> bool:
    """Whether the actual lines match the expected ones: a `...` line spans any lines, the placeholders the varying
    part of one line; trailing whitespace is ignored. Unordered: each expected line matches a different actual
    line, in any order, and with a `...` further lines are allowed."""
    actual = [line.rstrip() for line in actual]
    if unordered:
        return _matches_unordered([line for line in expected if line != "..."], actual, "..." in expected)
    patterns = [None if line == "..." else _line_pattern(line) for line in expected]
    reachable = {0}  # how many actual lines the expected lines so far can have consumed
    for pattern in patterns:
        if pattern is None:
            reachable = set(range(min(reachable), len(actual) + 1)) if reachable else set()
        else:
            reachable = {i + 1 for i in reachable if i < len(actual) and pattern.match(actual[i])}
    return len(actual) in reachable


def _matches_unordered(expected: list[str], actual: list[str], extra: bool) -> bool:
    """A matching of every expected line to its own actual line (augmenting paths), covering all actual lines
    unless extra ones are allowed."""
    if len(expected) > len(actual) or (not extra and len(expected) != len(actual)):
        return False
    patterns = [_line_pattern(line) for line in expected]
    owner: dict[int, int] = {}

    def assign(e: int, seen: set[int]) -> bool:
        for a, text in enumerate(actual):
            if a not in seen and patterns[e].match(text):
                seen.add(a)
                if a not in owner or assign(owner[a], seen):
                    owner[a] = e
                    return True
        return False

    return all(assign(e, set()) for e in range(len(patterns)))
