"""A job's environment: NCCL/Gloo profiles, the seed notes' settings as options, env files, and trap warnings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..errors import UsageError
from ..launching.names import check_env_name

__all__ = [
    "PROFILES",
    "SETTINGS",
    "env_warnings",
    "job_environment",
    "parse_env_file",
    "parse_env_item",
    "read_env_file",
]

# `^lo,docker0`: the seed notes' value; NCCL then skips both loopback and Docker's bridge.
_IFNAME = "^lo,docker0"
PROFILES: dict[str, dict[str, str]] = {
    "nccl": {"NCCL_SOCKET_IFNAME": _IFNAME, "NCCL_DEBUG": "WARN"},
    "nccl-debug": {
        "NCCL_SOCKET_IFNAME": _IFNAME,
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    },
    "nccl-ethernet": {"NCCL_SOCKET_IFNAME": _IFNAME, "NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"},
    "gloo": {"OMP_NUM_THREADS": "1"},
}

# (option, variable, help): the settings of the seed notes, each as an option named after its variable.
SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("--nccl-socket-ifname", "NCCL_SOCKET_IFNAME", "interfaces NCCL may use, e.g. eth0 or ^lo,docker0"),
    ("--nccl-debug", "NCCL_DEBUG", "NCCL log level: WARN, INFO or TRACE"),
    ("--nccl-ib-disable", "NCCL_IB_DISABLE", "1 = no InfiniBand, use sockets"),
    ("--nccl-p2p-disable", "NCCL_P2P_DISABLE", "1 = no GPU peer-to-peer transfers"),
    ("--nccl-algo", "NCCL_ALGO", "collective algorithm: ring, tree, collnet..."),
    ("--nccl-topo-file", "NCCL_TOPO_FILE", "a topology XML file on the compute nodes"),
    ("--omp-num-threads", "OMP_NUM_THREADS", "threads per rank, to avoid contention"),
    ("--gloo-socket-ifname", "GLOO_SOCKET_IFNAME", "the one interface Gloo uses, e.g. eth0"),
)


def parse_env_item(item: str, where: str = "--env") -> tuple[str, str]:
    """`NAME=VALUE` -> (NAME, VALUE); the value is taken literally."""
    name, eq, value = item.partition("=")
    if not eq:
        raise UsageError(f"{where} {item!r}: expected NAME=VALUE, e.g. NCCL_DEBUG=INFO")
    try:
        check_env_name(name)
    except UsageError as exc:
        raise UsageError(f"{where} {item!r}: {exc}") from None
    return name, value


def parse_env_file(text: str, source: str) -> list[tuple[str, str]]:
    """`[export] NAME=VALUE` lines, read with POSIX sh quoting (what `set -a; . FILE` would set), no expansion.

    As in sh: 'single quotes' keep everything, "double quotes" take backslash escapes of $ ` " \\ and newline,
    a backslash outside quotes keeps the next character, a quoted value may span lines, `#` starts a comment only
    at the start of a word (`A=x#y` is `x#y`), and one line may set several variables. Unlike sh, `$NAME` and
    backticks are kept as written, not expanded (as docker's env files do). CRLF line ends and a UTF-8 byte order
    mark are accepted. Anything sh would run as a command, or parse as an operator (; & | < > ( )), is an error.
    """
    pairs = []
    for lineno, words in _sh_statements(text.removeprefix("\ufeff").replace("\r\n", "\n"), source):
        where = f"{source}:{lineno}:"
        if words and words[0] == ("export", None):
            words = words[1:]
        if not words:
            raise UsageError(f"{where} expected NAME=VALUE after export, e.g. export NCCL_DEBUG=INFO")
        for word, equals in words:
            if equals is None:
                raise UsageError(
                    f"{where} expected NAME=VALUE (quote a value with spaces), got {word!r}; "
                    "an env file only sets variables"
                )
            pairs.append(parse_env_item(f"{word[:equals]}={word[equals + 1 :]}", where))
    return pairs


def _sh_statements(text: str, source: str) -> list[tuple[int, list[tuple[str, int | None]]]]:
    """Split `text` into sh statements (one per unquoted newline): (first line, words), comments dropped.

    Each word is (text, index of its assignment '=' or None): the '=' counts when everything before it was
    unquoted, as sh requires of `NAME=`.
    """
    statements: list[tuple[int, list[tuple[str, int | None]]]] = []
    words: list[tuple[str, int | None]] = []
    word: list[str] | None = None  # the word being read, None between words
    equals: int | None = None
    quoted = False  # some part of the current word was quoted (before any '=')
    lineno, start, i = 1, 1, 0
    while i < len(text):
        char = text[i]
        if char in " \t\n" or (char == "#" and word is None):
            if word is not None:
                words.append(("".join(word), equals))
                word, equals, quoted = None, None, False
            if char == "#":
                i = text.find("\n", i)
                i = len(text) if i < 0 else i
                continue
            if char == "\n":
                if words:
                    statements.append((start, words))
                words, lineno, start = [], lineno + 1, lineno + 1
            i += 1
            continue
        word = [] if word is None else word
        if char == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise UsageError(f"{source}:{lineno}: no closing ' for the quote opened here; close it as in sh")
            word.append(text[i + 1 : end])
            lineno, quoted, i = lineno + text.count("\n", i, end), True, end + 1
        elif char == '"':
            i, lineno = _double_quoted(text, i + 1, lineno, source, word)
            quoted = True
        elif char == "\\":
            if text[i + 1 : i + 2] == "\n":  # a line continuation: both disappear
                lineno += 1
            else:
                word.append(text[i + 1 : i + 2] or "\\")
            i += 2
        elif char in ";&|<>()":
            raise UsageError(
                f"{source}:{lineno}: {char!r} is an sh operator; quote the value that holds it, e.g. A='x{char}y'"
            )
        else:
            if char == "=" and equals is None and not quoted:
                equals = len("".join(word))
            word.append(char)
            i += 1
    if word is not None:
        words.append(("".join(word), equals))
    if words:
        statements.append((start, words))
    return statements


def _double_quoted(text: str, i: int, lineno: int, source: str, word: list[str]) -> tuple[int, int]:
    """Read a "..." body from text[i] into `word`; return the index after the closing quote and the line."""
    opened = lineno
    while i < len(text) and text[i] != '"':
        if text[i] == "\\" and text[i + 1 : i + 2] in ("$", "`", '"', "\\", "\n"):
            if text[i + 1] != "\n":
                word.append(text[i + 1])
            lineno += text[i + 1] == "\n"
            i += 2
            continue
        lineno += text[i] == "\n"
        word.append(text[i])
        i += 1
    if i >= len(text):
        raise UsageError(f'{source}:{opened}: no closing " for the quote opened here; close it as in sh')
    return i + 1, lineno


def read_env_file(path: str) -> list[tuple[str, str]]:
    """Read and parse the env file at `path`."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read env file {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_env_file(text, path)


def job_environment(
    profile: str | None,
    files: Sequence[Iterable[tuple[str, str]]] = (),
    settings: Mapping[str, str | None] | None = None,
    items: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """Merge, later winning: the profile, env files in order, the setting options, then --env items."""
    if profile is not None and profile not in PROFILES:
        raise UsageError(f"--profile {profile!r}: use one of {', '.join(PROFILES)}")
    env = dict(PROFILES[profile]) if profile else {}
    for pairs in files:
        env.update(pairs)
    env.update({k: v for k, v in (settings or {}).items() if v is not None})
    env.update(items)
    return env


def env_warnings(env: Mapping[str, str], nodes: int = 1) -> list[str]:
    """Known traps in NCCL/Gloo settings, each as one sentence saying what to do instead."""
    warnings = []
    ifname = env.get("NCCL_SOCKET_IFNAME")
    if ifname is not None and ifname.startswith("^"):
        excluded = {p.strip() for p in ifname.lstrip("^").split(",")}
        if "lo" not in excluded and not any(p.startswith("lo") for p in excluded):
            warnings.append(
                f"NCCL_SOCKET_IFNAME={ifname} excludes {', '.join(sorted(excluded))} but not lo, so NCCL "
                "may pick the loopback interface and hang across nodes; use ^lo,docker0 or name the "
                "interface (e.g. eth0)"
            )
    elif ifname is not None and nodes > 1 and ifname.split(",")[0] in ("lo", "=lo"):
        warnings.append(
            f"NCCL_SOCKET_IFNAME={ifname} is the loopback interface, which cannot reach the other "
            f"{nodes - 1} node(s); name a network interface such as eth0"
        )
    gloo = env.get("GLOO_SOCKET_IFNAME")
    if gloo is not None and gloo.startswith("^"):
        warnings.append(
            f"GLOO_SOCKET_IFNAME={gloo}: Gloo has no '^' exclusion syntax and looks for an interface "
            "of that name; name the interface itself, e.g. GLOO_SOCKET_IFNAME=eth0"
        )
    topo = env.get("NCCL_TOPO_FILE")
    if topo is not None and not topo.startswith(("/", "$")):
        warnings.append(
            f"NCCL_TOPO_FILE={topo} is a relative path, resolved on every node from the job's working "
            "directory; give an absolute path"
        )
    if env.get("NCCL_P2P_DISABLE") == "1":
        warnings.append(
            "NCCL_P2P_DISABLE=1 turns off NVLink/PCIe peer-to-peer and slows intra-node collectives; "
            "set it only to work around a broken P2P setup"
        )
    return warnings
