"""``python -m selfrag_core``: the ``selfrag`` command."""

import sys

from selfrag_core.cli import main

sys.exit(main())
