"""Before a launch: every host of -H or the hostfile that the launch uses resolves here, or hpcdist says which."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor, wait

from ..errors import UsageError
from .hostfile import parse_hostfile, parse_hosts_arg, read_hostfile_text
from .options import MpirunOptions
from .selection import select_hosts
from .world import World

__all__ = ["RESOLVE_SECONDS", "check_names_resolve", "hostfile_line"]

RESOLVE_SECONDS = 5.0  # how long the names of the hosts may take to resolve, all together
_AGENT_VARS = ("PRTE_MCA_plm_ssh_agent", "OMPI_MCA_plm_rsh_agent", "HYDRA_LAUNCHER_EXEC")


def hostfile_line(text: str, host: str) -> int | None:
    """The number of the first line of hostfile `text` that names `host` (None: none does)."""
    for lineno, raw in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        words = raw.split("#", 1)[0].split()
        if words and words[0].partition(":")[0] == host:
            return lineno
    return None


def check_names_resolve(options: MpirunOptions, world: World, timeout: float = RESOLVE_SECONDS) -> None:
    """Raise UsageError naming the first host of -H or the hostfile whose name does not resolve on this machine.

    Only the hosts that --include/--exclude keep are looked up: one left out is never contacted. Skipped with a
    launch agent (--launch-agent or its variables in `world`): the agent, not this machine's resolver, finds the
    hosts; nor is this host (`world`'s name, or localhost) looked up. A name
    whose lookup is still pending after `timeout` seconds is left to the launcher.

    Raises:
        UsageError: a host name does not resolve; the message says where it was given.
    """
    if options.launch_agent is not None or any(name in world.environ for name in _AGENT_VARS):
        return
    text = ""
    if options.hostfile is not None:
        text = read_hostfile_text(options.hostfile)
        hosts = parse_hostfile(text, options.hostfile)
        source = f"hostfile {options.hostfile}"
    elif options.hosts is not None:
        hosts = parse_hosts_arg(options.hosts)
        source = f"-H {options.hosts}"
    else:
        return
    used = select_hosts(hosts, options.include, options.exclude, source)
    names = [s.host.host for s in used if s.host.host not in ("localhost", world.hostname)]
    if not names:
        return
    pool = ThreadPoolExecutor(max_workers=min(len(names), 16), thread_name_prefix="hpcdist-resolve")
    lookups = {name: pool.submit(_resolves, name) for name in names}
    wait(lookups.values(), timeout)
    pool.shutdown(wait=False)  # a lookup still pending (a slow resolver) is left to finish on its own
    for name, lookup in lookups.items():
        if lookup.done() and not lookup.result():
            if options.hostfile is not None:
                line = hostfile_line(text, name)
                where = f"hostfile {options.hostfile}" + (f" line {line}" if line is not None else "")
            else:
                where = f"-H {options.hosts}"
            raise UsageError(
                f"host {name!r} (from {where}) does not resolve on this machine, so mpirun could not start its "
                "daemon there; fix the name or remove it"
            )


def _resolves(name: str) -> bool:
    """Whether `name` resolves to any address."""
    try:
        return bool(socket.getaddrinfo(name, None))
    except (OSError, UnicodeError):
        return False
