"""``python -m kvmon`` runs the same entry point as the ``kvmon`` command."""

import sys

from kvmon.cli import main

sys.exit(main())
