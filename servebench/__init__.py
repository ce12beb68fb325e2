"""servebench: honest LLM-serving benchmarks with every failure kept in the counts."""

from servebench.errors import ConfigError, InputFormatError, RecordValidationError, ServebenchError
from servebench.records.loaders import load_table, read_path
from servebench.analysis.percentiles import nearest_rank, percentile
from servebench.records.table import STATUSES, RecordTable, TimingRecord
from servebench.analysis.summary import CONTRACT_FIELDS, SLO, ContractError, Report, build_report, summarize

__version__ = "0.1.0"

__all__ = [
    "CONTRACT_FIELDS", "SLO", "STATUSES", "ConfigError", "ContractError", "InputFormatError",
    "RecordTable", "RecordValidationError", "Report", "ServebenchError", "TimingRecord",
    "build_report", "load_table", "nearest_rank", "percentile", "read_path", "summarize", "__version__",
]
