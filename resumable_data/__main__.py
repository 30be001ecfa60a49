"""``python -m resumable_data COMMAND ...``: the ``resumable-data`` command line, for an environment
whose ``bin/`` is not on ``PATH`` (a virtual environment that is not activated)."""

import sys

from resumable_data.cli import main

if __name__ == "__main__":  # documentation tools import every module: only run as a program
    sys.exit(main())
