"""The machinery behind hpcdist's pytest plugin (`hpcdist.pytest_plugin`): outcome agreement and deadlines.

`agreement` is pure apart from a non-blocking reduction (and an allgather when ranks disagree); `deadline`
owns the per-rank deadline thread.
Nothing here imports mpi4py or torch at import time. May import: errors, waits, abort, runtime.env.
"""

__all__: list[str] = []
