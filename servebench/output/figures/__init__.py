"""Plotly figure builders: pure functions from data to ``plotly.graph_objects.Figure`` (no I/O)."""
