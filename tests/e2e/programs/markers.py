"""How a test program's ranks wait on one another's progress, never on a sleep: each says where it is with a file
in $MARKERS, the test's own directory, and a rank that must wait polls for the files it needs."""

import os
import sys
import time
from pathlib import Path


def mark(name: str) -> None:
    """Say `name`: the file $MARKERS/name."""
    Path(os.environ["MARKERS"], name).touch()


def wait_for_marks(names: list[str], who: str, seconds: float = 120) -> None:
    """Wait until $MARKERS holds every one of `names`; after `seconds`, exit saying who waited for what."""
    folder = Path(os.environ["MARKERS"])
    deadline = time.monotonic() + seconds
    while missing := [name for name in names if not (folder / name).exists()]:
        if time.monotonic() > deadline:
            sys.exit(f"{who} waited {seconds:g} s for {', '.join(missing)} in {folder}")
        time.sleep(0.01)  # between two looks
