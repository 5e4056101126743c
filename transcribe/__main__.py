"""`python -m transcribe`: the command line (see transcribe.cli)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
