"""Run the servebench CLI: ``python -m servebench ...``."""

from servebench.cli.core import main

main()
