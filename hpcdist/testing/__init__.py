"""The machinery behind hpcdist's pytest plugin (`hpcdist.pytest_plugin`): outcome agreement and deadlines.

`agreement` is pure apart from one non-blocking allgather; `watchdog` owns the per-rank deadline thread.
Nothing here imports mpi4py or torch at import time.
"""

__all__: list[str] = []
