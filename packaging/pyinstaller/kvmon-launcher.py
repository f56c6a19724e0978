"""Entry script of the frozen kvmon: the same main() as the `kvmon` command."""

import multiprocessing
import sys

from kvmon.cli import main

if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
