"""CLI commands, one module per domain; each module decorates functions with ``servebench.cli.app``."""
