"""Output for people: terminal tables, plotly figures, the static HTML site, safe text and strict JSON."""
