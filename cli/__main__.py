"""`python -m cli`: the `cpn` command."""

import sys

from cli import main

sys.exit(main())
