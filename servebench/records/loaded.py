"""What reading one file gives: its parsed rows, the format it was read as, and what reading could not carry over.

Both the canonical readers (``loaders``) and the importers of other tools' exports return this, so it
lives below both of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servebench.records.schema import ParsedRows


@dataclass
class LoadedRecords:
    """Parsed rows from one file, with what the reader could not carry over."""

    rows: ParsedRows
    format: str
    warnings: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
