"""`python -m hpcdist` is the `hpcdist` command."""

import sys

from .cli import main

sys.exit(main())
