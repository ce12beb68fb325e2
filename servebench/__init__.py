"""servebench: honest LLM-serving benchmarks with every failure kept in the counts."""

from .errors import ConfigError, InputFormatError, RecordValidationError, ServebenchError
from .loaders import load_table, read_path
from .percentiles import nearest_rank, percentile
from .records import STATUSES, RecordTable, TimingRecord
from .summary import CONTRACT_FIELDS, SLO, ContractError, Report, build_report, summarize

__version__ = "0.1.0"

__all__ = [
    "CONTRACT_FIELDS", "SLO", "STATUSES", "ConfigError", "ContractError", "InputFormatError",
    "RecordTable", "RecordValidationError", "Report", "ServebenchError", "TimingRecord",
    "build_report", "load_table", "nearest_rank", "percentile", "read_path", "summarize", "__version__",
]
