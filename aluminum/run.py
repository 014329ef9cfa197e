"""``python -m aluminum.run -n N program [args...]``: mpiexec with this machine's settings.

The entry point only; the command line is aluminum/launch/cli.py, the launcher
aluminum/launch/launcher.py."""
import sys

from .launch.cli import main

if __name__ == "__main__":
    sys.exit(main())
