"""What the dashboard's pages decide beyond layout: which runs Compare shows, how a window reads, fcfs against fair.

Pure functions over data; no Streamlit here (``servebench`` never imports it), so each is tested as a unit.
"""

from servebench.dashboard.runs import baseline_first, comparable

__all__ = ["baseline_first", "comparable"]
