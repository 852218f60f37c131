"""`python -m ctxbus` runs the `ctxbus` command line."""

import sys

from ctxbus.coordinator.cli import main

sys.exit(main())
