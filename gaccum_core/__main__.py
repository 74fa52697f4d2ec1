"""`python -m gaccum_core`: the command line."""

import sys

from gaccum_core.cli.main import main

sys.exit(main())
