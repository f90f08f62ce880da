"""The one exception type for user mistakes: the CLI prints it as `hpcdist: error: …` and exits 2."""

__all__ = ["UsageError"]


class UsageError(Exception):
    """A mistake in the user's input or environment: what, where, and how to fix it."""
