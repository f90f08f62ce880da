"""`python -m hpcdist.examples [--write] [--root DIR]`: the example files' check, for scripts that call it so."""

import sys

from .jobs.examples import main

if __name__ == "__main__":
    sys.exit(main())
