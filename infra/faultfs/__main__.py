"""`python -m infra.faultfs SOURCE MOUNTPOINT --control SOCKET` serves a
faultfs; `python -m infra.faultfs ctl SOCKET REQUEST` talks to one (fs.py)."""

import sys

from infra.faultfs.fs import main

sys.exit(main())
