"""`hpcdist doctor`'s binding rows, pure: what `--bind auto` would give each local rank on this node."""

from __future__ import annotations

from ..errors import UsageError
from ..placement.binding import binding_env, plan_binding
from .facts import Check, Facts

__all__ = ["check_binding"]


def check_binding(f: Facts) -> list[Check]:
    """The node's topology and each local rank's share under --bind auto, or why there is none."""
    if f.topology is None:  # not probed (Facts built by hand), or unreadable
        return [Check("bind", "warn", f"cannot read this node's topology: {f.topology_error}", _FIX)] * bool(
            f.topology_error
        )
    n = f.local_world_size
    head = f"--bind auto, {n} local rank{'s' * (n != 1)} ({f.local_world_size_from}): {f.topology.describe()}"
    try:
        plan = plan_binding(f.topology, n, f.bind_environ)
    except UsageError as exc:
        return [Check("bind", "warn", head, str(exc))]
    rows = [Check("bind", "info", head)]
    for share in plan:
        env = ", ".join(f"{k}={v}" for k, v in sorted(binding_env(share, f.bind_environ).items()))
        rows.append(Check("bind", "info", share.describe() + (f"; {env}" if env else "")))
    return rows


_FIX = "check /sys/devices/system/node and /sys/devices/system/cpu, or give --topology FILE (lstopo --of xml FILE)"
