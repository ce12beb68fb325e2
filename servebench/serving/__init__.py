"""The serving model: scheduler, workload, scenario, simulator, sweep, and the torch engine with its HTTP API."""
