"""`python -m ctxbus.coordinator.cli` runs the `ctxbus` command line."""

import sys

from ctxbus.coordinator.cli import main

sys.exit(main())
