"""The serving model: scheduler, workload, scenario, simulator, sweep, and the torch engine with its HTTP API."""

from servebench.serving.compiled import enable as _enable_native

_enable_native(__path__)  # the compiled scheduler and event loop, when built for these sources (serving.native)
