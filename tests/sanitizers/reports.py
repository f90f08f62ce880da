"""The sanitizer tier's verdict: read the sanitizers' logs of one run and fail on what hpcdist must answer for.

`python tests/sanitizers/reports.py DIR --processes N --library SO` reads every log in DIR (the ranks'
`log_path=DIR/<tool>`, one file per process, `<tool>.<pid>`), lists each report (ThreadSanitizer, AddressSanitizer,
UndefinedBehaviorSanitizer) with its kind and where it meets the compiled backend's source (SO, resolved to
file:line), alike reports counted once, and exits 1 when any report remains or when fewer than N processes wrote a
log (the ranks run with verbosity=1, so a sanitizer that ran always writes one). `--suppressions FILE`
(tests/sanitizers/tsan.supp) takes out the reports of libraries hpcdist does not build: a ThreadSanitizer report
with an access in such a library (whose own ordering ThreadSanitizer cannot see), another sanitizer's report with no
frame in the backend's .so. A race between two accesses of instrumented code is never suppressed.

Frames in the backend's .so are resolved here with addr2line: GCC's runtimes symbolise with libbacktrace, which
reads the libraries loaded when it first symbolises, and the backend is loaded (dlopen) after MPI's first reports.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Report", "check", "main", "parse", "resolve", "suppressions"]

_BEGIN = re.compile(
    r"^(WARNING: ThreadSanitizer: (?P<tsan>[^(\n]+)"
    r"|==\d+==ERROR: (?P<tool>\w+Sanitizer): (?P<asan>\S+( \S+)?)"
    r"|\S+: runtime error: (?P<ubsan>.+)"
    r"|(?P<checker>\w+Sanitizer): (?P<check>CHECK failed: .+))"
)
_FRAME = re.compile(r"^\s+#\d+ .*\((?P<module>[^()+\s]+)\+(?P<offset>0x[0-9a-f]+)\)\s*$")
_BACKEND = "hpcdist_native_"  # the compiled backend's module name, hence its .so's: building.py
_SOURCE = "/mpi_backend/csrc/"  # its source, in an already symbolised frame or UBSan's location
_RUNTIME = re.compile(r"\((libtsan|libasan|libubsan)\.so[.\d]*\+0x")  # a sanitizer runtime frame (interceptor)
# A report's kind -> the suppression type that names it (ThreadSanitizer's own names)
_TYPES = {
    "data race": "race",
    "lock-order-inversion": "deadlock",
    "unlock of an unlocked mutex": "mutex",
    "destroy of a locked mutex": "mutex",
    "signal-unsafe call inside of a signal": "signal",
    "thread leak": "thread",
}


@dataclass(frozen=True)
class Report:
    """One sanitizer report: its kind, the log it is in, its lines, and its frames in the backend (as printed)."""

    kind: str
    log: Path
    lines: tuple[str, ...]

    def suppressed_by(self, suppressions: Iterable[tuple[str, str]]) -> str | None:
        """The first `(type, pattern)` that takes this report out, or None.

        A ThreadSanitizer report goes when an access in it (the code that made it: its stack's first frame outside
        the sanitizer's runtime) is in a library a suppression names: ThreadSanitizer cannot see that library's own
        ordering (MPI's completion of a call, torch's reference counts), so it cannot judge the race either way.
        The backend may be elsewhere in the stacks (calling MPI, or touching a buffer MPI wrote before its call
        returned). A race between two accesses in code the tier instrumented always stays, as does another
        sanitizer's report with a frame in the backend.
        """
        kind = self.kind.split(": ", 1)[1].split(" (")[0].strip()
        if self.kind.startswith("ThreadSanitizer"):
            for type_, pattern in suppressions:
                if _TYPES.get(kind) == type_ and any(pattern in top for top in self.accesses):
                    return f"{type_}:{pattern}"
            return None
        if self.backend_frames:
            return None
        frames = [line for line in self.lines if line.startswith("    #")]
        for type_, pattern in suppressions:
            if _TYPES.get(kind) == type_ and any(pattern in frame for frame in frames):
                return f"{type_}:{pattern}"
        return None

    @property
    def accesses(self) -> list[str]:
        """The first frame outside the sanitizer's runtime of each access stack (a race's two accesses, a
        lock-order cycle's acquisitions); not the stacks of a thread's or a mutex's creation, nor an allocation."""
        tops: list[str] = []
        section, taken = "", True
        for line in self.lines:
            if not line.startswith("    "):
                section, taken = line.strip(), False
                continue
            access = section.startswith(("Write", "Read", "Atomic", "Previous")) or "acquired here" in section
            if taken or not access or not line.startswith("    #") or _RUNTIME.search(line):
                continue
            tops.append(line)
            taken = True
        return tops

    @property
    def backend_frames(self) -> list[str]:
        """Its lines that are a frame in the backend's .so, or UBSan's location in the backend's source."""
        return [line for line in self.lines if _BACKEND in line or _SOURCE in line]


def parse(text: str, log: Path) -> list[Report]:
    """The reports in one log's text, each from its first line to its SUMMARY line (or the next report)."""
    reports: list[Report] = []
    kind, lines = None, []
    for line in text.splitlines():
        begin = _BEGIN.match(line)
        if begin is not None:
            if kind is not None:
                reports.append(Report(kind, log, tuple(lines)))
            found = begin.group("tsan") or begin.group("asan") or begin.group("ubsan") or begin.group("check")
            tool = "ThreadSanitizer" if begin.group("tsan") else begin.group("tool") or begin.group("checker")
            tool = tool or "UndefinedBehaviorSanitizer"
            kind, lines = f"{tool}: {found.strip()}", [line]
        elif kind is not None:
            lines.append(line)
            if line.startswith("SUMMARY: "):
                reports.append(Report(kind, log, tuple(lines)))
                kind, lines = None, []
    if kind is not None:
        reports.append(Report(kind, log, tuple(lines)))
    return reports


def resolve(frames: Iterable[str], library: Path) -> dict[str, list[str]]:
    """Each offset of `frames` (the backend's `(module+0xOFFSET)` lines) -> its `function file:line`s by addr2line.

    The innermost inlined function comes first.
    """
    offsets = sorted({match.group("offset") for match in map(_FRAME.match, frames) if match is not None})
    if not offsets or not library.is_file():
        return {}
    result = subprocess.run(
        ["addr2line", "-C", "-f", "-i", "-a", "-e", str(library), *offsets],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    chains: dict[str, list[str]] = {}
    chain: list[str] = []
    function = None
    for word in result.stdout.splitlines():  # per offset: the address, then a function and its file:line per level
        if function is None and word.startswith("0x"):
            chain = chains.setdefault(hex(int(word, 16)), [])
        elif function is None:
            function = word
        else:
            chain.append(f"{function} {word}")
            function = None
    return chains


def _level(line: str, chains: dict[str, list[str]]) -> list[str]:
    """A frame's `function file:line` levels: its own text where symbolised, else addr2line's for the backend."""
    match = _FRAME.match(line)
    text = re.sub(r"^\s*#\d+ (0x[0-9a-f]+ in )?|\s*\([^()]+\+0x[0-9a-f]+\)\s*$", "", line)
    if "<null>" not in line or match is None or _BACKEND not in match.group("module"):
        return [text]
    return chains.get(hex(int(match.group("offset"), 16)), [line.strip()])


def _where(report: Report, chains: dict[str, list[str]]) -> str:
    """Where a report meets the backend's source: per stack, its first frame in csrc/; else its first backend frame.

    The stacks are the access, the previous one, an allocation...; not a thread's creation.
    """
    places, section = [], ""
    for line in report.lines:
        if not line.startswith("    "):
            section = line.strip()
            continue
        if section.startswith("Thread ") or section in places:
            continue
        source = next((level for level in _level(line, chains) if _SOURCE in level), None)
        if source is not None:
            places.append(section)
            places.append(source.split(_SOURCE, 1)[0].rsplit(" ", 1)[0] + " " + source.split(_SOURCE, 1)[1])
    if places:
        return "; ".join(f"{places[i].rstrip(':')}: {places[i + 1]}" for i in range(0, len(places), 2))
    return _level(report.backend_frames[0], chains)[0]


def suppressions(path: Path) -> list[tuple[str, str]]:
    """The `(type, pattern)` entries of a suppressions file (`TYPE:PATTERN` lines; `#` comments)."""
    entries = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            type_, _, pattern = line.strip().partition(":")
            entries.append((type_, pattern))
    return entries


def check(logs: Path, processes: int, library: Path, suppress: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(problems, notes) of the run whose logs are in `logs`: the reports left and too few logs; the suppressed.

    A problem per kind of report (alike ones counted), with where it meets the backend; a note per suppression used.
    """
    files = sorted(path for path in logs.iterdir() if path.is_file())
    problems, notes = [], []
    if len(files) < processes:
        problems.append(
            f"{len(files)} sanitizer log(s) in {logs} for {processes} processes: a rank ran without the sanitizer's "
            "runtime, or its options (log_path, verbosity=1) did not reach it"
        )
    reports = [report for path in files for report in parse(path.read_text(errors="replace"), path)]
    chains = resolve((line for r in reports for line in r.backend_frames), library)
    matched: Counter[str] = Counter()
    alike: Counter[str] = Counter()  # a report's text without addresses, mutex and thread numbers -> how many
    first: dict[str, str] = {}
    for report in reports:
        entry = report.suppressed_by(suppress)
        if entry is not None:
            matched[entry] += 1
            continue
        where = f"in the backend: {_where(report, chains)}" if report.backend_frames else "no backend frame"
        text = re.sub(r"0x[0-9a-f]+| [MT]\d+\b| \(mutexes: [^)]*\)|of size \d+ ", "", f"{report.kind}; {where}")
        alike[text] += 1
        first.setdefault(text, f"{report.kind}; {where} (first in {report.log.name})")
    problems += [f"{count} x {first[text]}" for text, count in alike.most_common()]
    notes += [f"suppressed {count} x {name}" for name, count in sorted(matched.items())]
    return problems, notes


def main(argv: list[str] | None = None) -> int:
    """Check one run's logs; print each report and each suppression used; 1 if any report or a missing log."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("logs", type=Path, help="the directory of the run's sanitizer logs")
    parser.add_argument("--processes", type=int, required=True, help="how many processes ran under the sanitizer")
    parser.add_argument("--library", type=Path, required=True, help="the backend's .so the ranks loaded")
    parser.add_argument("--suppressions", type=Path, help="reports of other libraries to take out (TYPE:LIBRARY)")
    args = parser.parse_args(argv)
    if not args.logs.is_dir():
        print(f"hpcdist: error: no sanitizer logs at {args.logs}; run the tier's mpiexec first", file=sys.stderr)
        return 1
    suppress = suppressions(args.suppressions) if args.suppressions else []
    problems, notes = check(args.logs, args.processes, args.library, suppress)
    for note in notes:
        print(f"{args.logs.name}: {note}")
    for problem in problems:
        print(f"{args.logs.name}: {problem}", file=sys.stderr)
    print(f"{args.logs.name}: {len(problems)} problem(s)", file=sys.stderr if problems else sys.stdout)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
