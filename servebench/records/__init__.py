"""Timing records: the schema and its rules, reading and writing files, record sets, other tools' exports."""
