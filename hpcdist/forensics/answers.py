"""A rank's answer to the hang report, held to MAX_ANSWER bytes, so that rank 0 gathers N answers, not N dumps (pure).

What goes first when an answer is larger: torch's own recorder dump (the report then builds it from the ledger),
then all but the last KEEP_CALLS calls of the ledger (the first divergence is among the last calls), then each
thread's frames past KEEP_FRAMES and the threads past KEEP_THREADS; an answer still too large keeps only its phase
and its last few calls. The answer then says how large it was (`trimmed`), and the report names those ranks.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

from .frdump import PART

__all__ = ["KEEP_CALLS", "KEEP_FRAMES", "KEEP_THREADS", "MAX_ANSWER", "bounded"]

MAX_ANSWER = 64 << 10  # bytes of one rank's pickled answer: 640 MB into rank 0 at most at 10,000 ranks
KEEP_CALLS = 32
KEEP_FRAMES = 24
KEEP_THREADS = 8
_LAST_RESORT_CALLS = 4


def _size(answer: Mapping[str, Any]) -> int:
    """The answer's size as it travels (pickled, as mpi4py's send pickles it)."""
    return len(pickle.dumps(dict(answer), protocol=pickle.HIGHEST_PROTOCOL))


def bounded(answer: dict[str, Any], most: int = MAX_ANSWER) -> dict[str, Any]:
    """`answer` if it is at most `most` bytes, else a trimmed copy of it with `trimmed` (its size before) set."""
    size = _size(answer)
    if size <= most:
        return answer
    trimmed = dict(answer)
    if isinstance(trimmed.get(PART), dict):
        trimmed[PART] = {key: value for key, value in trimmed[PART].items() if key != "torch_dump"}
    if _size(trimmed) > most:
        trimmed["ledger"] = list(answer["ledger"])[-KEEP_CALLS:]
    if _size(trimmed) > most and "stacks" in trimmed:
        trimmed["stacks"] = tuple((name, frames[:KEEP_FRAMES]) for name, frames in trimmed["stacks"][:KEEP_THREADS])
    if _size(trimmed) > most:
        trimmed = {"phase": answer["phase"], "ledger": list(answer["ledger"])[-_LAST_RESORT_CALLS:]}
    trimmed["trimmed"] = size
    return trimmed
