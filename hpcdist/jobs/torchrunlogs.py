"""Where torchrun wrote each rank's output, in a job hpcdist generated with `--launch torchrun --log-dir DIR`.

The generated script gives every node's torchrun a directory of its own, `DIR/node-N` ($SLURM_NODEID, expanded
on the node), and the job's id as its run id. torchrun then writes (torch/distributed/elastic/multiprocessing/
api.py, `DefaultLogsSpecs.reify`) `DIR/node-N/JOBID_XXXXXXXX/attempt_K/LOCAL_RANK/{stdout,stderr}.log`:
`JOBID_XXXXXXXX` is a fresh `mkdtemp` for each start of torchrun (each restart of the script's --max-restarts
loop, each requeue), `attempt_K` counts torchrun's own restarts. Global rank = node * nproc_per_node + local rank.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ..errors import UsageError
from ..records import record
from ..values import parse_whole
from .render import shquote

__all__ = [
    "NODE_WRAPPER",
    "PLAIN_WRAPPER",
    "RankFiles",
    "TorchrunLayout",
    "check_torchrun_tags",
    "find_rank_files",
    "read_layout",
]

# what each node's `bash -c` runs (sbatch.sh.j2): $0 is torchrun; with --log-dir, $1 is `--log-dir=DIR`
PLAIN_WRAPPER = 'exec "$0" --node_rank="$SLURM_NODEID" "$@"'
NODE_WRAPPER = 'exec "$0" --node_rank="$SLURM_NODEID" "$1/node-$SLURM_NODEID" --rdzv_id="$SLURM_JOB_ID" "${@:2}"'
_LAST_OPTION = "--master_addr=$MASTER_ADDR"  # the template's first option after torchrun's own (ours end there)


@record(frozen=True)
class TorchrunLayout:
    """What a torchrun-mode batch script says about its per-rank files."""

    log_dir: str  # as given to --log-dir: relative to the job's WorkDir unless absolute
    nproc_per_node: int
    nnodes: int

    def place(self, rank: int, job: str) -> tuple[int, int]:
        """(node, local rank) of global rank `rank`, else UsageError naming the job's ranks."""
        ranks = self.nproc_per_node * self.nnodes
        if not 0 <= rank < ranks:
            raise UsageError(f"--rank {rank}: job {job} has ranks 0 to {ranks - 1}")
        return divmod(rank, self.nproc_per_node)


@record(frozen=True)
class RankFiles:
    """One rank's torchrun files in the run and attempt shown, and the choice that was made."""

    attempt_dir: Path  # .../node-N/JOBID_XXXXXXXX/attempt_K
    local_rank: int
    runs: int  # torchrun starts of the job on that node (restarts of the script, requeues)
    attempts: int  # torchrun's own attempts in the run shown

    @property
    def stdout(self) -> Path:
        """The rank's stdout.log."""
        return self.attempt_dir / str(self.local_rank) / "stdout.log"

    @property
    def stderr(self) -> Path:
        """The rank's stderr.log."""
        return self.attempt_dir / str(self.local_rank) / "stderr.log"

    @property
    def chosen(self) -> bool:
        """Whether there were earlier runs or attempts to choose from (the latest is shown)."""
        return self.runs > 1 or self.attempts > 1

    def describe(self, job: str, rank: int) -> str:
        """`job 12 rank 3: the latest of 2 torchrun runs on node-1 (12_…), attempt_0, local rank 1: …/attempt_0/1`."""
        run, node = self.attempt_dir.parent, self.attempt_dir.parent.parent.name
        runs = f"the latest of {self.runs} torchrun runs on {node}" if self.runs > 1 else f"torchrun's run on {node}"
        attempt = self.attempt_dir.name + (f" (the latest of {self.attempts})" if self.attempts > 1 else "")
        folder = self.attempt_dir / str(self.local_rank)
        return f"job {job} rank {rank}: {runs} ({run.name}), {attempt}, local rank {self.local_rank}: {folder}"


def read_layout(script: str) -> TorchrunLayout | None:
    """The per-rank files of a torchrun-mode batch script with --log-dir; None for any other script."""
    _, wrapper, rest = script.partition(f"bash -c {shquote(NODE_WRAPPER)}")
    if not wrapper:
        return None
    lex = shlex.shlex(rest, posix=True)
    lex.whitespace_split, lex.commenters = True, ""
    words: list[str] = []
    try:
        while (word := lex.get_token()) not in (None, _LAST_OPTION):
            if word != "\n":  # a line continuation
                words.append(str(word))
    except ValueError:  # an unbalanced quote: not a script hpcdist wrote
        return None
    options = dict(word[2:].partition("=")[::2] for word in words[1:] if word.startswith("--"))
    nproc, nnodes = parse_whole(options.get("nproc_per_node", "")), parse_whole(options.get("nnodes", ""))
    if len(words) < 2 or not words[1].startswith("--log-dir=") or not nproc or not nnodes:
        return None
    return TorchrunLayout(words[1].removeprefix("--log-dir="), nproc, nnodes)


def find_rank_files(root: Path, job_id: str, layout: TorchrunLayout, rank: int) -> RankFiles | None:
    """Rank `rank`'s files under `root` (the log dir) in the job's latest torchrun run and attempt.

    None while torchrun has made no run directory for the job on the rank's node (or no attempt in it).

    Raises:
        UsageError: the rank is not one of the job's ranks.
    """
    node, local = layout.place(rank, job_id)
    node_dir = root / f"node-{node}"
    try:
        runs = [p for p in node_dir.iterdir() if p.name.startswith(f"{job_id}_") and p.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not runs:
        return None
    # the newest run: mkdtemp names are random, so order by the time torchrun last made an attempt_K in it
    run = max(runs, key=lambda p: (p.stat().st_mtime_ns, p.name))
    attempts = [(n, p) for p in run.glob("attempt_*") if (n := parse_whole(p.name[len("attempt_") :])) is not None]
    if not attempts:
        return None
    return RankFiles(max(attempts)[1], local, len(runs), len(attempts))


def check_torchrun_tags(script: str, job: str) -> None:
    """Raise UsageError when `script` ran torchrun with neither --log-dir nor --tag (no line names its rank)."""
    if f"bash -c {shquote(PLAIN_WRAPPER)}" in script and "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=" not in script:
        raise UsageError(
            f"job {job} ran torchrun with neither --log-dir nor --tag, so no line of its output says which rank "
            "wrote it; submit it again with --log-dir DIR (each rank's own files, which `hpcdist logs JOBID --rank "
            "N` reads) or --tag (lines marked [RANK]:)"
        )
