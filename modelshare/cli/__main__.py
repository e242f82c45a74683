"""``python -m modelshare.cli ...``: the `modelshare` command (`modelshare.cli.main`), for a process started with a
given interpreter (the simulator's miner and owners, the process-level tests)."""

import sys

from modelshare.cli import main

sys.exit(main())
