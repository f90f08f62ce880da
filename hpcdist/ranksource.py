"""The variables one launcher sets in each rank's environment: a row of the table `runtime.env` reads (a leaf).

Each MPI family (`families`) and each scheduler (`schedulers`) declares its row; `runtime.env` puts them in order
with torchrun's and PMIx's and reads this process's place in the job from them.
"""

from __future__ import annotations

from .records import record

__all__ = ["Source"]


@record(frozen=True)
class Source:
    """The environment variables one launcher sets; the first set name of a tuple wins."""

    launcher: str  # how `hpcdist env` names the launcher (LaunchEnv.launcher)
    rank: str
    world_size: tuple[str, ...]
    local_rank: str | None
    local_world_size: tuple[str, ...]
    node_rank: str | None
    markers: tuple[str, ...]
    started_by: str  # what sets them, as an error names it ("Open MPI's mpirun")
    node_count: str | None = None  # the number of nodes, which node_rank must be below
    borrowed: tuple[str, ...] = ()  # read for a value, but set by other launchers too: they do not mark it present

    @property
    def variables(self) -> tuple[str, ...]:
        """Every variable that marks this source as present, in a fixed order."""
        names = (self.rank, *self.world_size, self.local_rank, *self.local_world_size, self.node_rank)
        return tuple(n for n in (*names, *self.markers) if n and n not in self.borrowed)
