"""Capacity: KV-cache memory, model shapes (presets, HF configs), step-time models and accelerators.

The roofline turns a model shape and an accelerator into the simulator's step-time model; the planner
that searches deployments on the simulator lives above the simulator, in ``servebench.planning``.
"""

from servebench.capacity.gpus import (
                                      ACCELERATORS,
                                      DEFAULT_GPUS,
                                      Accelerator,
                                      accelerator_for_device,
                                      get_accelerator,
                                      parse_prices,
)
from servebench.capacity.roofline import Calibration, Efficiency, Roofline, calibrate, roofline, unloaded_times_s

__all__ = ["ACCELERATORS", "DEFAULT_GPUS", "Accelerator", "Calibration", "Efficiency", "Roofline",
           "accelerator_for_device", "calibrate", "get_accelerator", "parse_prices", "roofline", "unloaded_times_s"]
