"""IBM Spectrum LSF's `jsrun` (its Job Step Manager, on CSM clusters such as OLCF's Summit and LLNL's Lassen) as the
launcher: its command line inside an LSF job.

jsrun starts tasks in resource sets, each some CPUs and GPUs of one host, every set of a launch alike (IBM's "jsrun
command" page, Spectrum LSF 10.1); it reads the job's hosts itself, so hpcdist hands it none. hpcdist's model is one
set per host that holds the host's ranks and all its CPUs and GPUs, so that every rank sees its node's GPUs and
takes the one at LOCAL_RANK: `--nrs NODES --rs_per_host 1 --tasks_per_rs N --cpu_per_rs ALL_CPUS --gpu_per_rs
ALL_GPUS` (as LLNL's Lassen jobs write it, LBANN's and DLIO's), the nodes and N from `-np` and `--map-by
ppr:N:node`, with `--launch_distribution packed` (a set's ranks together, a node's ranks in a block) and `--bind`
for `--bind-to`: `none`, or `packed:1` (one core each, jsrun's default at OLCF). Options and short forms (`-n`,
`-r`, `-a`, `-c`, `-g`, `-d`, `-b`, `-E` for `--env NAME=VALUE`, `--smpiargs` for Spectrum MPI's own options, as
`--smpiargs="-mca coll_hcoll_enable 1"`): the OLCF Summit user guide, "Common jsrun Options" and its examples.
jsrun passes the caller's environment on (`-D`/`--env_no_propagate` names what it keeps back), so the variables
hpcdist passes by name are left to it and those with a value go as `--env NAME=VALUE`.

What jsrun prints when a task fails, and what its status then means, OLCF's guide does not say (nor the part of
IBM's page read): hpcdist reads none of its lines and takes its status as it is. Its ranks' variables
(JSM_NAMESPACE_*) are read by `hpcdist.schedulers.lsf`.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import UsageError
from . import register
from .base import Family, MpirunSpec, check_job_launch, per_node

__all__ = ["Jsrun"]

_BIND = {"none": "none", "core": "packed:1"}  # mpirun's --bind-to: jsrun's --bind


@register
class Jsrun(Family):
    """LSF's jsrun, which starts one task per rank in the resource sets of the LSF job it runs in."""

    name = "jsrun"
    title = "LSF's jsrun"
    order = 92
    launcher_names: ClassVar[tuple[str, ...]] = ("jsrun",)
    program: ClassVar[str | None] = "jsrun"
    job_hosts = "LSF"

    def command(self, spec: MpirunSpec) -> list[str]:
        """The jsrun argv for `spec`.

        Raises:
            UsageError: no -np or --map-by ppr:N:node, a binding jsrun has no word for, an --mca value with a
                blank (Spectrum MPI's --smpiargs is one string), or what `check_job_launch` refuses.
        """
        check_job_launch(spec, self.title)
        if spec.bind_to not in _BIND:
            raise UsageError(f"--bind-to {spec.bind_to!r} has no jsrun --bind; use one of {', '.join(_BIND)}")
        nodes, each = per_node(spec, self.title)
        argv = [spec.mpirun, "--nrs", str(nodes), "--rs_per_host", "1", "--tasks_per_rs", str(each)]
        argv += ["--cpu_per_rs", "ALL_CPUS", "--gpu_per_rs", "ALL_GPUS", "--launch_distribution", "packed"]
        argv += ["--bind", _BIND[spec.bind_to], *self.smpiargs(spec.mca)]
        for name, value in spec.env:
            argv += [] if value is None else ["--env", f"{name}={value}"]
        return argv + list(spec.extra) + list(spec.program)

    def smpiargs(self, mca: tuple[tuple[str, str], ...]) -> list[str]:
        """`--smpiargs "-mca KEY VALUE …"` for Open MPI's --mca pairs (Spectrum MPI is Open MPI's kin), or none.

        Raises:
            UsageError: a key or value that is empty or holds a blank.
        """
        for key, value in mca:
            if not key or not value or any(c.isspace() for c in key + value):
                raise UsageError(
                    f"--mca {key!r} {value!r}: jsrun passes Spectrum MPI's options in one --smpiargs string, split at "
                    "blanks; give a key and a value without blanks"
                )
        return ["--smpiargs", " ".join(f"-mca {key} {value}" for key, value in mca)] if mca else []
