"""What the dashboard's pages decide beyond layout: which runs Compare shows, how a window reads, fcfs against fair,
what a trace needs.

Pure functions over data (but ``kept_upload``, which writes an upload to a file); no Streamlit here
(``servebench`` never imports it), so each is tested as a unit. Modules the pages import directly (not
re-exported here, so that ``servebench.dashboard.sharing``, which serve-engine imports, stays light):
``sources`` (the record sets held and the sidebar's decisions), ``reports`` (a report and the site),
``wording`` (ms by default, the engineer view, each metric's one-line meaning), ``overview_svg`` (Summary's
first screen), ``server_view`` (the server's own metrics), ``summary_tables`` and ``verdict_tables`` (tables
split or built for a page), ``sharing`` (local or shared, what a shared dashboard may start).
"""

from servebench.dashboard.cells import by_row, cell
from servebench.dashboard.fairness import TenantShift, shift_headline, shift_table, tenant_shifts
from servebench.dashboard.runs import baseline_first, comparable
from servebench.dashboard.trace_charts import hit_rate_chart, over_time_charts
from servebench.dashboard.traces import (
                                         Metric,
                                         answers,
                                         kept_upload,
                                         option_text,
                                         plan_notes,
                                         plan_request,
                                         plan_rows,
                                         trace_metrics,
)
from servebench.dashboard.windows import seconds, shared_clock, span_text, window_text

__all__ = ["Metric", "TenantShift", "answers", "baseline_first", "by_row", "cell", "comparable", "hit_rate_chart",
           "kept_upload", "option_text", "over_time_charts", "plan_notes", "plan_request", "plan_rows", "seconds",
           "shared_clock", "shift_headline", "shift_table", "span_text", "tenant_shifts", "trace_metrics",
           "window_text"]
