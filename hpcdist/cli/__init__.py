"""The `hpcdist` command: argparse -> spec -> dry-run print or run. Parsing and dispatch only.

It may import every other wing (lazily, so that text-only commands never import torch); nothing imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import os
import re
import sys
import traceback
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, NoReturn

from .. import settings, settingtable
from .._version import __version__
from ..errors import TooFewRanks, UsageError, WaitTimeout
from .habits import habit, passed_on, passed_words
from .types import Checked

__all__ = ["INTERNAL_ERROR", "build_parser", "main", "other_spellings"]

INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h): hpcdist itself failed; 2 stays the user's mistake
_DEBUG = settingtable.DEBUG.name  # set (not 0) to print the traceback of an internal error


class _Parser(argparse.ArgumentParser):
    """argparse that cannot be misread, reporting mistakes as UsageError (`hpcdist: error: …`, exit 2).

    No option is ever abbreviated, and `-nps` is an unknown option rather than `-n ps` when a single-dash long
    option (`-np`) begins the same way. Every `--long-option` is also taken in its other spelling (`--master_port`
    for `--master-port`, as torchrun does), hidden from the help. An unknown option, command or choice gets a
    "did you mean" from this parser's own names and points at this parser's help. Every value it hands on is
    checked once here: never empty, UTF-8, and through its Checked type (types.py) when it has one.
    """

    habits: Mapping[str, str] = {}  # other launchers' options, each with the spelling here (habits.py)
    passes: Mapping[str, str] | None = None  # another tool's options this command writes on (`passed` in the result)
    passes_words: Mapping[str, tuple[int, int]] | None = None  # or its single-dash ones (qsub's), fewest/most values
    tool = "sbatch"  # that tool, as a message names it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; see `{self.prog} --help`")

    def parse_known_args(  # type: ignore[override]  # one signature for typeshed's overloads
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Parse `args`; anything this parser does not know is a UsageError here, naming this subcommand."""
        for spelling, action in other_spellings(self).items():
            self._option_string_actions.setdefault(spelling, action)
        passed: list[tuple[str, str | None]] | list[tuple[str, ...]] = []
        if self.passes is not None and args is not None:
            args, passed = passed_on(list(args), self.passes, self._option_string_actions, self.habits, self.tool)
        if self.passes_words is not None and args is not None:
            args, passed = passed_words(list(args), self.passes_words, self._option_string_actions, self.tool)
        parsed, extras = super().parse_known_args(args, namespace)
        if self.passes is not None or self.passes_words is not None:
            parsed.passed = passed
        if extras:
            self._unknown(extras[0])
        return parsed, extras

    def _unknown(self, word: str) -> NoReturn:
        """Refuse `word`, an option or argument this parser does not take, suggesting its closest own option."""
        name = word.split("=", 1)[0]
        if not name.startswith("-") or name == "-":
            self.error(f"unexpected argument {word!r} for `{self.prog}`")
        instead = habit(self.habits, name)
        if instead is not None:
            raise UsageError(f"{name} is not an option of `{self.prog}`: {instead}")
        names = [o for action in self._actions for o in action.option_strings if o not in ("-h", "--help")]
        longer = [o for o in names if o.startswith(name) and len(name) > 2]  # an abbreviation, which no parser takes
        if longer:
            hint = f"options are never abbreviated: did you mean {' or '.join(longer[:3])}? "
        else:
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.7)
            hint = f"did you mean {close[0]}? " if close else ""
        raise UsageError(f"unknown option {name} for `{self.prog}`; {hint}see `{self.prog} --help` for its options")

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        """No abbreviations: only `-Xvalue` (a short option and its value), unless a long `-Xy…` option exists."""
        if option_string[1:2] in self.prefix_chars:
            return []
        longer = [o for o in self._option_string_actions if len(o) > 2 and o[:3] == option_string[:3]]
        if longer:
            return []
        return [t for t in super()._get_option_tuples(option_string) if t[1] == option_string[:2]]

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is None or value in action.choices:
            return
        close = difflib.get_close_matches(str(value), [str(choice) for choice in action.choices], n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        if isinstance(action, argparse._SubParsersAction):
            raise UsageError(f"unknown command {value!r} for `{self.prog}`; {hint}see `{self.prog} --help`")
        shown = ", ".join(map(str, action.choices))
        raise argparse.ArgumentError(action, f"unknown value {value!r}; {hint}choose one of {shown}")

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        if action.nargs == argparse.PARSER:  # a subcommand's words: its own parser checks them, naming the option
            return super()._get_value(action, arg_string)
        names = action.option_strings
        option = next((o for o in names if o.startswith("--") or len(o) > 2), names[0]) if names else action.dest
        if action.option_strings and not arg_string.strip():
            raise UsageError(f"{option} needs a value, got an empty one; give the value or leave {option} out")
        try:
            arg_string.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(
                f"{option}: {arg_string!r} holds bytes that are not UTF-8 text; hpcdist writes UTF-8, so pass the "
                "value in UTF-8 (e.g. convert a file name with `iconv` or rename it)"
            ) from None
        if isinstance(action.type, Checked):
            try:
                return action.type.check(arg_string, option)
            except UsageError as exc:
                raise UsageError(f"{exc}; see `{self.prog} --help`") from None
        return super()._get_value(action, arg_string)


def other_spellings(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each `--long-option`'s other spelling (`--master_port` <-> `--master-port`) that the parser lacks."""
    found: dict[str, argparse.Action] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                for old, new in (("-", "_"), ("_", "-")):
                    other = "--" + option[2:].replace(old, new)
                    if other != option and other not in parser._option_string_actions:
                        found[other] = action
    return found


# The module of each command's parser and function: a command named on the line loads its own module alone (a
# third of `hpcdist mpirun`'s own start: docs/measurements/rank-cost.md); anything else loads every one.
_MODULES = {
    **dict.fromkeys(("env", "mpirun", "run"), "launch"),
    **dict.fromkeys(("hostfile", "sbatch", "torchrun"), "generate"),
    **dict.fromkeys(("flux", "gridengine", "lsf", "pbs"), "batch"),
    **dict.fromkeys(("mpijob", "trainjob"), "kubernetes"),
    **dict.fromkeys(("bench", "doctor"), "diagnose"),
    **dict.fromkeys(("logs", "status"), "follow"),
    "trace": "trace",
}


def _modules(command: str | None) -> list[ModuleType]:
    """The modules of the subcommands to parse: `command`'s alone when it is one, else every one, in help's order."""
    names = [_MODULES[command]] if command in _MODULES else list(dict.fromkeys(_MODULES.values()))
    return [importlib.import_module(f".{name}", __name__) for name in names]


def build_parser(command: str | None = None) -> _Parser:
    """The parser of the subcommands: `command`'s module's alone when it names one, else all of them."""
    parser = _Parser(
        prog="hpcdist",
        description="MPI-first HPC job toolkit for PyTorch.",
        epilog="Options are never abbreviated. Every --long-option is also taken with '_' for '-' (--master_port "
        "for --master-port), as torchrun takes them.",
    )
    parser.add_argument("--version", action="version", version=f"hpcdist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in _modules(command):
        module.add_parsers(sub)
    return parser


_PEER_LOST = re.compile(r"gloo/transport/|[Cc]onnection (?:reset|closed) by peer")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; user mistakes print `hpcdist: error: …` and return 2, a bug in hpcdist returns 70."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = words[0] if words else None  # the top level takes no option but --version and --help before it
    try:
        args = build_parser(command).parse_args(words)
        commands = {name: run for module in _modules(args.command) for name, run in module.COMMANDS.items()}
        return commands[args.command](args)
    except UsageError as exc:
        if not _told(str(exc)):  # a rank of hpcdist mpirun: the launcher says it once for the job
            print(f"hpcdist: error: {exc}", file=sys.stderr)
        return 2
    except TooFewRanks as exc:  # every survivor alike: said once; the rank ends, and --max-restarts may start again
        if not _told(exc.line(), status=1) and exc.survivor == 0:
            print(f"hpcdist: error: {exc.line()}", file=sys.stderr)
        return 1
    except WaitTimeout as exc:  # the message says who waited for what; the other ranks may be waiting too
        print(f"hpcdist: error: {exc}", file=sys.stderr)
        return _end_job(1)
    except UnicodeEncodeError as exc:
        print(
            f"hpcdist: error: cannot write {exc.object[exc.start : exc.end]!r} in this output's encoding "
            f"({exc.encoding}); use a UTF-8 locale (e.g. LANG=C.UTF-8) or send the output to a file",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:  # our reader went away (`| head`): nothing more to say to it
        with contextlib.suppress(OSError, ValueError):  # stdout may have no file descriptor (captured)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exiting does not flush into it
        return 1
    except Exception as exc:  # noqa: BLE001 - the one place every other exception ends
        if _distributed_failure(exc):  # e.g. a peer died under a workload: the job failed, hpcdist did not
            print(f"hpcdist: error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return _end_job(1)
        return _internal_error(exc)


def _told(message: str, status: int = 2) -> bool:
    """Whether this command runs as a rank of `hpcdist mpirun` (in the shim's process) and told it `message` (an
    error every rank meets alike, the job's status with it)."""
    from ..runtime.process import existing

    process = existing()  # made by the shim (or hpcdist.init) only: a plain command reads no contract
    return process is not None and process.tell_usage(message, status)


def _distributed_failure(exc: Exception) -> bool:
    """Whether torch.distributed raised it: a failure of the job, not a bug in hpcdist.

    That is a DistError of any kind, or the plain RuntimeError gloo raises when a peer's connection drops
    (e.g. inside DDP's backward: `[…/gloo/transport/tcp/pair.cc:534] Connection closed by peer`).
    """
    dist = sys.modules.get("torch.distributed")  # never imported here: without it, it cannot have raised
    error = getattr(dist, "DistError", None)
    if isinstance(error, type) and isinstance(exc, error):
        return True
    return dist is not None and type(exc) is RuntimeError and bool(_PEER_LOST.search(str(exc)))


def _internal_error(exc: Exception) -> int:
    """Say that hpcdist failed and how to report it; the traceback only when the DEBUG setting is on."""
    debug = settings.debug(os.environ)
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    print(
        f"hpcdist: internal error: {type(exc).__name__}: {exc}\n"
        f"hpcdist: this is a bug in hpcdist {__version__}, not a mistake of yours; please report it to hpcdist's "
        f"maintainers with the command you ran and {'this' if debug else f'the traceback {_DEBUG}=1 prints'}",
        file=sys.stderr,
    )
    return _end_job(INTERNAL_ERROR)


def _end_job(code: int) -> int:
    """In a job of several MPI ranks, end them all now (as an uncaught exception would); return `code`.

    A lone process (no MPI, or a world of one, e.g. a test calling main) just returns: no rank waits for it.
    """
    from ..abort import abort_job

    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        abort_job(code)
    return code
