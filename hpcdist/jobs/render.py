"""The one Jinja environment (site templates first, strict, shell-quoting filters) and render_*() -> str."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .. import settings
from .._version import __version__
from ..errors import UsageError
from ..hosts import HOST_NAME, HostSlots
from ..launching.hostfile import format_hostfile
from ..launching.names import check_env_name

if TYPE_CHECKING:  # jinja2 itself loads when a template is rendered: `--help` and the dry runs do without it
    import jinja2

__all__ = [
    "BUNDLED_DIR",
    "comment",
    "make_environment",
    "render_hostfile",
    "render_mpirun_script",
    "render_template",
    "sbatch_option",
    "sbatch_quote",
    "search_path",
    "shjoin",
    "shquote",
]

BUNDLED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
_SBATCH_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+\Z")


def _text(value: object, what: str) -> str:
    """A value as text for a script: str and int only, never None or a NUL byte."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UsageError(f"{what}: expected text or a number, got {value!r}; a template passes a wrong value")
    text = str(value)
    if "\0" in text:
        raise UsageError(f"{what}: {text!r} contains a NUL byte, which no shell argument can hold")
    return text


def shquote(value: object) -> str:
    """One shell word that bash reads back as exactly `value` (spaces, quotes, $, `, ; and newlines too)."""
    return shlex.quote(_text(value, "shell word"))


def shjoin(words: Iterable[object]) -> str:
    """Shell words joined by spaces, each quoted with shquote."""
    return " ".join(shquote(word) for word in words)


def sbatch_quote(value: object) -> str:
    """An #SBATCH value as sbatch's own line parser reads it back (double quotes, backslash escapes)."""
    text = _text(value, "#SBATCH value")
    if "\n" in text or "\r" in text:
        raise UsageError(f"#SBATCH value {text!r} contains a line break; an #SBATCH line cannot hold one, so remove it")
    if re.search("packjob|hetjob", text, re.IGNORECASE):
        raise UsageError(
            f"#SBATCH value {text!r} contains 'packjob'/'hetjob', which sbatch blanks out in #SBATCH lines"
        )
    if _SBATCH_PLAIN.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sbatch_option(option: Sequence[object]) -> str:
    """`--name=value` (or `--name` when value is None) for an #SBATCH line, the value quoted for sbatch."""
    name, value = option
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z-]*", name):
        raise UsageError(f"#SBATCH option name {name!r} is not a long option name like 'time'")
    if value is None:
        return f"--{name}"
    try:
        return f"--{name}={sbatch_quote(value)}"
    except UsageError as exc:
        raise UsageError(f"--{name}: {exc}") from None


def comment(value: object) -> str:
    """Text as shell/hostfile comment lines, each starting with `# ` (a newline cannot end the comment)."""
    return "\n".join("# " + line if line else "#" for line in _text(value, "comment").splitlines())


def search_path(template_dir: str | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Template directories in search order: --template-dir, the TEMPLATE_DIR setting's, then the bundled set.

    Raises:
        UsageError: either is no directory.
    """
    if template_dir and not os.path.isdir(template_dir):
        raise UsageError(
            f"--template-dir {template_dir!r} is not a directory; point it at a directory of *.j2 templates"
        )
    site = settings.template_dir(os.environ if environ is None else environ)
    return [path for path in (template_dir, site) if path] + [BUNDLED_DIR]


def make_environment(template_dir: str | None = None, environ: Mapping[str, str] | None = None) -> jinja2.Environment:
    """The Jinja environment every hpcdist template renders in: strict, shell-aware, site templates first."""
    import jinja2

    jinja = jinja2.Environment(
        loader=jinja2.FileSystemLoader(search_path(template_dir, environ)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    jinja.filters.update(
        shquote=shquote,
        shjoin=shjoin,
        sbatch=sbatch_quote,
        sbatch_option=sbatch_option,
        envname=check_env_name,
        comment=comment,
    )
    jinja.globals["version"] = __version__
    return jinja


def render_template(name: str, context: Mapping[str, Any], jinja: jinja2.Environment | None = None) -> str:
    """Render template `name`; a missing template or an undefined variable is a UsageError naming it."""
    import jinja2

    jinja = jinja or make_environment()
    dirs = getattr(jinja.loader, "searchpath", [])
    try:
        text = jinja.get_template(name).render(**context)
    except UsageError:
        raise  # a filter refused a value: its message says which
    except jinja2.TemplateNotFound as exc:
        where = ", ".join(dirs)
        raise UsageError(f"template {exc.name!r} not found in {where}; add it there or fix the name") from None
    except jinja2.TemplateSyntaxError as exc:
        raise UsageError(f"template {exc.filename or exc.name}:{exc.lineno}: {exc.message}") from None
    except jinja2.UndefinedError as exc:
        raise UsageError(
            f"template {_where(exc.__traceback__, name)}: {exc.message}; "
            "pass that variable or remove it from the template"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:  # loading it (or a template it includes)
        raise UsageError(f"cannot read template {name!r} from {', '.join(dirs)}: {exc}; save it as UTF-8 text") from exc
    except Exception as exc:  # a site template is the user's code: an error in it is theirs to fix
        raise UsageError(
            f"template {_where(exc.__traceback__, name)} failed: {type(exc).__name__}: {exc}; fix the template"
        ) from exc
    return text if text.endswith("\n") else text + "\n"


def _where(tb: TracebackType | None, name: str) -> str:
    """`file:line` of the innermost template frame in a traceback, else the template's name."""
    found = name
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            found = f"{filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def render_hostfile(
    hosts: Sequence[HostSlots], style: str = "openmpi", note: str = "", jinja: jinja2.Environment | None = None
) -> str:
    """An Open MPI (`host slots=N`) or MPICH (`host:N`) hostfile, with an optional comment `note`."""
    if not hosts:
        raise UsageError("no hosts for the hostfile; give --hosts, --nodelist, or run inside a Slurm allocation")
    for h in hosts:
        if not HOST_NAME.match(h.host):
            raise UsageError(
                f"host name {h.host!r} cannot appear in a hostfile; use letters, digits, '-', '_' and '.', "
                "starting with a letter or digit (e.g. node01 or 10.0.0.1)"
            )
        if h.slots < 1:
            raise UsageError(f"host {h.host!r}: slots must be at least 1, got {h.slots}")
    body = format_hostfile(hosts, style)
    return render_template("hostfile.j2", {"style": style, "hosts": list(hosts), "body": body, "note": note}, jinja)


def render_mpirun_script(
    argv: Sequence[str],
    env: Mapping[str, str],
    jinja: jinja2.Environment | None = None,
    append: bool = True,
    root_check: bool = False,
) -> str:
    """A reusable shell script that exports `env` (sorted) and execs the mpirun `argv`, extra arguments appended.

    `append=False` (an argv of several app contexts, where appended words would reach only the last one): the
    script refuses arguments instead. `root_check` (Open MPI): the script allows running as root when it runs as
    root, so `argv` should not say --allow-run-as-root.
    """
    if not argv:
        raise UsageError("no mpirun command line to write into the script")
    exports = [(check_env_name(k), v) for k, v in sorted(env.items())]
    context = {"argv": list(argv), "env": exports, "append": append, "root_check": root_check}
    return render_template("mpirun.sh.j2", context, jinja)
