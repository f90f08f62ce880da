"""hpcdist's exceptions: one for user mistakes, and one hierarchy for waits that ran out of time."""

__all__ = ["MapTimeout", "RendezvousTimeout", "UsageError", "WaitTimeout"]


class UsageError(Exception):
    """A mistake in the user's input or environment: what, where, and how to fix it.

    The CLI prints it as `hpcdist: error: …` and exits 2.
    """


class WaitTimeout(TimeoutError):
    """A wait outlived its timeout; the message says who waited for what."""


class RendezvousTimeout(WaitTimeout):
    """A rank waited longer than the job's timeout for its peers during rendezvous."""


class MapTimeout(WaitTimeout):
    """A rank waited longer than the job's timeout for a message of `hpcdist.map`."""
