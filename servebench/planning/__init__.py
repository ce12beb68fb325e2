"""The capacity planner: from a workload and SLOs to GPUs, replicas and cost, searched on the simulator.

The planner reuses the KV calculator (``servebench.capacity.kv``) for memory, the roofline
(``servebench.capacity.roofline``) for step times, the simulator and its capacity search
(``servebench.serving.sweep``) for the load a replica sustains under SLOs, and the diagnosis's
vocabulary for what binds.
"""

from servebench.planning.planner import (
                                         Evaluation,
                                         Option,
                                         Plan,
                                         PlanRequest,
                                         Workload,
                                         cost_curve,
                                         evaluate_configurations,
                                         plan,
                                         planned_point,
                                         price,
)

__all__ = ["Evaluation", "Option", "Plan", "PlanRequest", "Workload", "cost_curve", "evaluate_configurations", "plan",
           "planned_point", "price"]
