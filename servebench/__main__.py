"""Run the servebench CLI: ``python -m servebench ...``."""

from .cli import main

main()
