"""Test tiers: a test is marked by what it starts, read from its source, its fixtures' and its module's helpers'.

``engine`` runs the torch engine, ``server`` starts an HTTP server (uvicorn, a scripted fake, Streamlit),
``process`` starts child processes, ``app`` runs the dashboard's pages in Streamlit's AppTest (seconds each). conftest marks every collected test so (beside any mark it carries,
such as ``browser`` and ``slow``), and the fast selection leaves them out (README, "Tests")::

    pytest -m "not slow and not browser and not engine and not server and not process and not app"
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

TIERS: dict[str, tuple[str, ...]] = {
    "engine": ("EngineService", "EngineLoop", "Decoder(", "run_workload(", "timing_run", "serve-engine",
               "serve_engine", "torch."),
    "server": ("serve_in_background", "LocalHTTPServer", "FaultyServer", "faulty_run", "ReasoningServer",
               "streamlit_server", "make_server("),
    "process": ("subprocess", "Popen(", "sys.executable", "multiprocessing", "ProcessPoolExecutor", "ray.init",
                "local_ray"),
    "app": ("AppTest",),
}

# Tests of the fast selection that took 1.5 s or more of wall time each (0.5 s or more of CPU) in one run on
# 2026-12-03 (this 2-core machine at load 8): marked slow, so the selection stays within its budget (README,
# "Tests"). Parametrized tests are named once, for all their cases.
SLOW: frozenset[str] = frozenset((
    "tests/test_defects_validate_sweep.py::test_validate_sweep_on_a_trace_end_to_end",
    "tests/test_disagg_plan.py::test_plan_finds_the_fewest_disaggregated_instances_and_says_against_colocated",
    "tests/test_disagg_plan.py::test_plan_prints_the_disaggregated_table",
    "tests/test_duckdb_fleet.py::test_the_fleet_section_of_one_file_is_the_in_memory_one",
    "tests/test_duckdb_fleet.py::test_the_fleet_section_of_several_parts_is_the_in_memory_one",
    "tests/test_duckdb_report.py::test_a_folder_is_one_record_set_equal_to_one_file",
    "tests/test_duckdb_report.py::test_distribution_edges_agree_at_sizes_that_bound_intervals",
    "tests/test_duckdb_report.py::test_duckdb_report_equals_the_in_memory_report_in_every_field",
    "tests/test_duckdb_report.py::test_prefix_cache_and_token_sections_equal_the_in_memory_report",
    "tests/test_figures_vegalite_sweep.py::test_trace_charts_are_thinned_step_lines_that_keep_the_peaks_and_the_budget",
    "tests/test_fleet.py::test_every_request_ends_on_exactly_one_replica",
    "tests/test_fleet.py::test_on_the_mooncake_trace_prefix_affinity_and_least_outstanding_pay",
    "tests/test_fleet_plan.py::test_bursts_need_more_replicas_than_division_says",
    "tests/test_fleet_plan.py::test_plan_cli_router_and_fleet_keys",
    "tests/test_fleet_plan.py::test_the_verified_count_is_never_below_the_divided_count",
    "tests/test_fleet_report.py::test_summarize_shows_the_fleet_by_either_engine",
    "tests/test_hf_config_hostile.py::test_a_float32_checkpoint_is_sized_as_served_in_16_bit",
    "tests/test_hostile_inputs.py::test_cli_exits_0_or_2_with_one_line_naming_the_file",
    "tests/test_importers.py::test_vllm_import_keeps_every_request_and_the_tools_counts",
    "tests/test_load_retries.py::test_any_retry_after_header_reads_as_a_wait_or_none",
    "tests/test_load_sender.py::test_the_plan_file_reads_back_what_was_written",
    "tests/test_loaders.py::test_vectorised_validation_reports_the_spec_order_first_error",
    "tests/test_percentiles.py::test_selection_matches_sorting_and_leaves_input_alone",
    "tests/test_record_trust.py::test_duckdb_gives_the_logical_section_and_its_warnings_as_in_memory",
    "tests/test_report.py::test_kv_section_without_admission_times_still_gives_the_limit",
    "tests/test_rundir.py::test_simulate_and_run_of_one_scenario_write_the_same_step_columns",
    "tests/test_simulate.py::test_conservation_validity_and_kv_bound",
    "tests/test_simulate.py::test_decode_runs_match_step_by_step",
    "tests/test_simulate.py::test_the_decode_cohort_plans_what_the_per_sequence_loop_plans",
    "tests/test_stepmodel.py::test_fit_recovers_jitter_plus_a_slow_drift_and_replays_its_memory_at_every_lag",
    "tests/test_stepmodel.py::test_fit_with_noise_keeps_the_total_and_the_spread_of_each_kind_of_step",
    "tests/test_summary.py::test_report_and_every_slice_agree_with_a_per_record_loop",
    "tests/test_summary.py::test_report_conserves_counts",
    "tests/test_summary.py::test_rules_checked_in_blocks_report_the_same_first_violation",
    "tests/test_summary.py::test_sorting_or_partitioning_the_distributions_gives_the_same_report",
    "tests/test_summary.py::test_whole_file_merged_from_its_slices_equals_it_measured_directly",
    "tests/test_sweep.py::test_a_trace_is_swept_by_its_speedup_with_the_same_requests",
    "tests/test_sweep.py::test_sweep_command_over_a_trace",
    "tests/test_textcolumns.py::test_duplicates_match_exact_counting_for_any_strings_and_slices",
    "tests/test_timeline.py::test_matches_brute_force_with_ties",
    "tests/test_timeline.py::test_peak_past_one_block_matches_the_direct_count",
    "tests/test_token_times_log.py::test_a_simulation_reports_the_same_from_runs_as_from_every_token_time",
    "tests/test_token_times_log.py::test_every_token_comes_back_to_its_row_in_order",
    "tests/test_token_times_log.py::test_run_gaps_equal_the_gaps_of_the_expanded_times",
    "tests/test_trace_replay.py::test_a_small_budget_falls_as_the_traces_lru_replay_says",
    "tests/test_trace_replay.py::test_prompts_share_exactly_the_tokens_their_leading_block_ids_share",
    "tests/test_trace_window.py::test_plan_sizes_for_the_peak_and_its_replicas_meet_the_slos_there",
    "tests/test_traces_stats.py::test_lru_hit_rates_match_an_ordered_dict_simulation",
    "tests/test_validate_sweep.py::test_validate_sweep_end_to_end",
))

_SOURCES: dict[Any, str] = {}


def _source(func: Callable[..., Any]) -> str:
    if func not in _SOURCES:
        try:
            _SOURCES[func] = textwrap.dedent(inspect.getsource(func))
        except (OSError, TypeError):
            _SOURCES[func] = ""
    return _SOURCES[func]


_NAMES: dict[str, frozenset[str]] = {}


def _names(source: str) -> frozenset[str]:
    if source not in _NAMES:
        try:
            _NAMES[source] = frozenset(n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name))
        except SyntaxError:
            _NAMES[source] = frozenset()
    return _NAMES[source]


def _helpers(source: str, module_globals: dict[str, Any], module: str) -> Iterable[Callable[..., Any]]:
    """Yield the functions and classes of the test's own module that ``source`` names."""
    for name in _names(source):
        obj = module_globals.get(name)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", None) == module:
            yield obj


def tiers_of(func: Callable[..., Any], fixtures: Iterable[Callable[..., Any]] = ()) -> set[str]:
    """Return the tiers a test belongs to: any of its sources, or of the module helpers they call, shows a sign."""
    module_globals = getattr(inspect.unwrap(func), "__globals__", {})
    module = getattr(func, "__module__", None)
    seen: set[Any] = set()
    todo = [func, *fixtures]
    text = []
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        source = _source(f)
        text.append(source)
        todo.extend(_helpers(source, module_globals, module))
    whole = "\n".join(text)
    return {tier for tier, signs in TIERS.items() if any(sign in whole for sign in signs)}
