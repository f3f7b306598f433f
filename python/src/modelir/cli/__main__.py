"""`python -m modelir.cli`: the same as the `modelir` command."""

import sys

from modelir.cli import main

sys.exit(main())
