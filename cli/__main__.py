"""Run the command line as ``python -m cli``."""

from __future__ import annotations

import sys

from cli.main import main

sys.exit(main())
