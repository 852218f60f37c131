"""`python -m coordinator.cli` runs the `ctxbus` command line."""

import sys

from coordinator.cli import main

sys.exit(main())
