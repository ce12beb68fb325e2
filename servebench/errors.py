"""Exceptions raised by servebench; the CLI and the app turn them into one-line messages."""

from __future__ import annotations


class ServebenchError(Exception):
    """Base class for every error servebench raises on purpose."""


class InputFormatError(ServebenchError, ValueError):
    """A file could not be read as records: wrong format, bad encoding, missing column."""


class RecordValidationError(ServebenchError, ValueError):
    """A record breaks the timing-record contract; the message names file, row and field."""

    def __init__(self, message: str, *, source: str | None = None, row: int | None = None,
                 field: str | None = None, rule: str | None = None) -> None:
        self.source = source
        self.row = row
        self.field = field
        self.rule = rule
        where = []
        if source:
            where.append(source)
        if row is not None:
            where.append(f"row {row}")
        if field:
            where.append(f"field '{field}'")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class ConfigError(ServebenchError, ValueError):
    """A model shape, budget, scenario or option is missing or inconsistent."""


class WorkerError(ServebenchError):
    """A load-generator worker or a Ray cluster failed, or cannot be reached."""
