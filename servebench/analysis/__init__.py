"""Analysis of records: percentiles, the timeline, the spec's contract and the full report, diagnosis."""
