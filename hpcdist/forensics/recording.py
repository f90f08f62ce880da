"""Recording torch.distributed's calls in this rank's ledger (`LEDGER`): a wrapper around each user-facing call.

Calls below dist.* (DDP's, the object collectives', a backend's own) come from sources (`sources.py`); a group
whose backend records its own calls is handed straight to the call. The watchdog reads the ledger at a timeout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..commcall import Call
from . import sources
from .ledger import Ledger

__all__ = ["LEDGER", "add_source", "instrument"]

LEDGER = Ledger()  # this rank's: the wrappers around torch's (process-wide) functions record into it

# name -> (index of the tensor argument, its keyword, index of the peer argument, its keyword,
#          the peer's label, its default, index of the group argument)
_CALLS: dict[str, tuple[int, str, int, str, str, Any, int]] = {
    "send": (0, "tensor", 1, "dst", "dst", None, 2),
    "recv": (0, "tensor", 1, "src", "src", "any", 2),
    "broadcast": (0, "tensor", 1, "src", "root", None, 2),
    "all_reduce": (0, "tensor", -1, "", "", None, 2),
    "reduce": (0, "tensor", 1, "dst", "root", None, 3),
    "all_gather": (1, "tensor", -1, "", "", None, 2),
    "gather": (0, "tensor", 2, "dst", "root", 0, 3),
    "scatter": (0, "tensor", 2, "src", "root", 0, 3),
    "reduce_scatter": (0, "output", -1, "", "", None, 3),
    "all_to_all": (1, "input_tensor_list", -1, "", "", None, 2),
    "all_gather_into_tensor": (1, "input_tensor", -1, "", "", None, 2),
    "reduce_scatter_tensor": (1, "input", -1, "", "", None, 3),
    "all_to_all_single": (1, "input", -1, "", "", None, 4),
    "barrier": (-1, "", -1, "", "", None, 0),
}


def instrument(dist: Any) -> None:
    """Wrap torch.distributed's user-facing calls so each records itself in LEDGER (once per process)."""
    for name, spec in _CALLS.items():
        original = getattr(dist, name)
        if not getattr(original, "_hpcdist_ledger", False):
            setattr(dist, name, _recorded(name, original, spec, dist))


def _recorded(name: str, call: Callable[..., Any], spec: tuple, dist: Any) -> Callable[..., Any]:
    """`call`, recording its operation, peer, shape, dtype and group around each blocking use."""
    t_index, t_key, p_index, p_key, p_label, p_default, g_index = spec

    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        group = args[g_index] if g_index < len(args) else kwargs.get("group")
        known = _NAMES.get(id(group)) or _name_group(group, dist)
        if known[2]:  # its backend records the call itself
            return call(*args, **kwargs)
        tensor = args[t_index] if 0 <= t_index < len(args) else kwargs.get(t_key)
        if type(tensor) is list or type(tensor) is tuple:
            tensor = tensor[0] if tensor else None
        peer = ""
        if p_label:
            value = args[p_index] if p_index < len(args) else kwargs.get(p_key, p_default)
            peer = f"{p_label}={'any' if value is None else value}"
        entry = LEDGER.start(
            name,
            peer,
            () if tensor is None else tensor.shape,  # torch.Size is a tuple; the dtype is named when sent
            "" if tensor is None else tensor.dtype,
            known[1],
        )
        try:
            return call(*args, **kwargs)
        finally:
            entry.finish()  # async calls count as done once issued

    fast = _forwarding(name, call, g_index, wrapper, dist)
    fast._hpcdist_ledger = wrapper  # the recording function (forensics' cause.py looks for its frame)
    return fast


def _forwarding(name: str, call: Callable[..., Any], g_index: int, recorded: Callable[..., Any], dist: Any) -> Any:
    """`recorded` behind a function with `call`'s own parameters, which hands a group whose backend records its calls
    straight to `call`: positional arguments instead of `*args, **kwargs` save ~0.1 µs a call (the mpi backend's
    8-byte all_reduce takes ~5 µs). `recorded` itself where the parameters are not all plain positional-or-keyword."""
    import inspect  # when torch.distributed is recorded: a rank's start does without it (4 ms)

    params = list(inspect.signature(call).parameters.values())
    names = [p.name for p in params]
    scope: dict[str, Any] = {"call": call, "recorded": recorded, "_NAMES": _NAMES, "_name_group": _name_group,
                             "dist": dist}  # fmt: skip
    plain = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params) and not set(names) & {*scope, "id", "known"}
    if not plain or g_index >= len(names) or names[g_index] != "group":
        return recorded
    signature = []
    for i, p in enumerate(params):
        if p.default is p.empty:
            signature.append(p.name)
        else:
            scope[f"_default{i}"] = p.default
            signature.append(f"{p.name}=_default{i}")
    passed = ", ".join(names)
    source = (
        f"def {name}({', '.join(signature)}):\n"
        f"    known = _NAMES.get(id(group)) or _name_group(group, dist)\n"
        f"    return (call if known[2] else recorded)({passed})\n"
    )
    exec(compile(source, f"<hpcdist wrapper of dist.{name}>", "exec"), scope)  # built from `call`'s own parameters
    return functools.wraps(call)(scope[name])


# id(group) -> (group, its name, whether its backend records its calls); the group is kept so its id stays its own
_NAMES: dict[int, tuple[Any, str, bool]] = {}


def _name_group(group: Any, dist: Any) -> tuple[Any, str, bool]:
    """The world ("world"; group None) or a subgroup named by its global ranks, e.g. `[0, 1]`, and whether its
    backend records its calls (a dict by id: hashing a ProcessGroup costs more)."""
    name = "world" if group is None else str(dist.get_process_group_ranks(group))
    try:
        covered = dist.is_initialized() and sources.covers(str(dist.get_backend(group)))
    except (RuntimeError, ValueError):  # a group this rank is not in: the call itself says so
        covered = False
    known = _NAMES[id(group)] = (group, name, covered)
    return known


def add_source(
    backend: str,
    calls: Callable[[], list[Call]],
    oldest: Callable[[], float | None],
    keep: Callable[[int], None],
) -> None:
    """A backend that records its own calls (see `sources.register`): the dist.* wrapper leaves its groups to it."""
    sources.register(backend, calls, oldest, keep)
    _NAMES.clear()
