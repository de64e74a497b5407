"""``python -m rlinfra.workloads [--write|--check]``: regenerate the Verl config key snapshot."""

from __future__ import annotations

import sys

from rlinfra.workloads.verl_config import main

sys.exit(main())
