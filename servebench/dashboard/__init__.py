"""What the dashboard's pages decide beyond layout: which runs Compare shows, how a window reads, fcfs against fair.

Pure functions over data; no Streamlit here (``servebench`` never imports it), so each is tested as a unit.
"""

from servebench.dashboard.cells import by_row, cell
from servebench.dashboard.fairness import TenantShift, shift_headline, shift_table, tenant_shifts
from servebench.dashboard.runs import baseline_first, comparable
from servebench.dashboard.windows import seconds, shared_clock, span_text, window_text

__all__ = ["TenantShift", "baseline_first", "by_row", "cell", "comparable", "seconds", "shared_clock",
           "shift_headline", "shift_table", "span_text", "tenant_shifts", "window_text"]
