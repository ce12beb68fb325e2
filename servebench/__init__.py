"""servebench: honest LLM-serving benchmarks with every failure kept in the counts.

The public names below are imported on first use, so ``import servebench`` alone loads no numpy:
the CLI sets its process's thread settings (``servebench.cli``) before numpy starts.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_HOMES = {
    "ConfigError": "servebench.errors", "InputFormatError": "servebench.errors",
    "RecordValidationError": "servebench.errors", "ServebenchError": "servebench.errors",
    "load_table": "servebench.records.loaders", "read_path": "servebench.records.loaders",
    "nearest_rank": "servebench.analysis.percentiles", "percentile": "servebench.analysis.percentiles",
    "STATUSES": "servebench.records.table", "RecordTable": "servebench.records.table",
    "TimingRecord": "servebench.records.schema",
    "CONTRACT_FIELDS": "servebench.analysis.contract", "SLO": "servebench.analysis.summary",
    "ContractError": "servebench.analysis.contract", "Report": "servebench.analysis.summary",
    "build_report": "servebench.analysis.summary", "summarize": "servebench.analysis.contract",
}

__all__ = sorted([*_HOMES, "__version__"])

if TYPE_CHECKING:
    from servebench.analysis.contract import CONTRACT_FIELDS, ContractError, summarize
    from servebench.analysis.percentiles import nearest_rank, percentile
    from servebench.analysis.summary import SLO, Report, build_report
    from servebench.errors import ConfigError, InputFormatError, RecordValidationError, ServebenchError
    from servebench.records.loaders import load_table, read_path
    from servebench.records.schema import TimingRecord
    from servebench.records.table import STATUSES, RecordTable


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'servebench' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
