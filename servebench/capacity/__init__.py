"""Capacity planning: accelerator presets, a roofline step model from hardware, and the planner's search.

The planner reuses the KV calculator (``servebench.kv``) for memory, the simulator and its capacity
search (``servebench.sweep``) for the load a replica sustains under SLOs, and the diagnosis's
vocabulary for what binds.
"""

from .gpus import ACCELERATORS, DEFAULT_GPUS, Accelerator, accelerator_for_device, get_accelerator, parse_prices
from .planner import (Evaluation, Option, Plan, PlanRequest, Workload, cost_curve, evaluate_configurations, plan,
                      planned_point, price)
from .roofline import Calibration, Efficiency, Roofline, calibrate, roofline, unloaded_times_s

__all__ = [
    "ACCELERATORS", "DEFAULT_GPUS", "Accelerator", "Calibration", "Efficiency", "Evaluation", "Option", "Plan",
    "PlanRequest", "Roofline", "Workload", "accelerator_for_device", "calibrate", "cost_curve",
    "evaluate_configurations", "get_accelerator", "parse_prices", "plan", "planned_point", "price", "roofline",
    "unloaded_times_s",
]
