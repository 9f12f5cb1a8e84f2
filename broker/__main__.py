"""`python -m broker`: run one broker (see broker/cli.py for the flags)."""

import sys

from broker.cli import main

sys.exit(main())
