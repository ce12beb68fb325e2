"""Shared pieces of the importers: reading JSON documents, classifying errors, building LoadedRecords.

Importers turn another tool's export into canonical record dicts, then hand them to
``records.parse_objects`` so validation is the same as for servebench's own files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from servebench.errors import InputFormatError
from servebench.records.loaded import LoadedRecords
from servebench.records.schema import parse_objects

OutsideWindow = Literal["mark", "drop"]
OUTSIDE_WINDOW_CHOICES: tuple[str, ...] = ("mark", "drop")

# Metrics of the servebench report that need real arrival/terminal times on one clock.
CLOCK_METRICS: tuple[str, ...] = (
    "successful_requests_per_second", "successful_output_tokens_per_second",
    "slo.goodput_requests_per_second", "slo.goodput_output_tokens_per_second",
    "active_requests", "in_service", "window_s",
)


@dataclass(frozen=True)
class Document:
    """A parsed export: one JSON value, or one JSON value per line (``lines``)."""

    value: Any
    lines: bool


@dataclass(frozen=True)
class ImportOptions:
    """What the user chose: which run of a multi-run file, and what to do with warm-up/cool-down requests."""

    run: int | None = None
    outside_window: OutsideWindow = "mark"
    tokens: Literal["client", "server"] = "client"  # AIPerf: whose output token count a success keeps

    def __post_init__(self) -> None:
        if self.run is not None and (isinstance(self.run, bool) or not isinstance(self.run, int) or self.run < 0):
            raise InputFormatError(f"import option run={self.run!r} must be a run number (0, 1, ...)")
        if self.outside_window not in OUTSIDE_WINDOW_CHOICES:
            raise InputFormatError(f"import option outside_window={self.outside_window!r} must be one of "
                                   f"{', '.join(OUTSIDE_WINDOW_CHOICES)}")
        if self.tokens not in ("client", "server"):
            raise InputFormatError(f"import option tokens={self.tokens!r} must be client or server")


def decode_text(data: bytes, source: str) -> str:
    """Return the bytes as UTF-8 text, or raise naming the file and the offset of the bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputFormatError(f"{source}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") \
            from None


def parse_document(data: bytes, source: str) -> Document:
    """Parse a whole-file JSON value, else JSON Lines; raise InputFormatError if it is neither."""
    text = decode_text(data, source)
    try:
        return Document(json.loads(text), lines=False)
    except RecursionError:
        raise InputFormatError(f"{source}: JSON nested too deeply to read") from None
    except json.JSONDecodeError as whole_exc:
        lines = [ln for ln in text.split("\n") if ln.strip()]
        if len(lines) < 2:
            raise InputFormatError(f"{source}: invalid JSON at line {whole_exc.lineno}, column {whole_exc.colno}: "
                                   f"{whole_exc.msg}") from None
        values = []
        for i, line in enumerate(lines, start=1):
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputFormatError(f"{source}: line {i}: invalid JSON at column {exc.colno}: {exc.msg}") from None
            except (RecursionError, ValueError) as exc:  # nested too deeply; an integer past 4300 digits
                why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
                raise InputFormatError(f"{source}: line {i}: unreadable JSON: {why}") from None
        return Document(values, lines=True)
    except ValueError as exc:  # an integer of more than 4300 digits
        raise InputFormatError(f"{source}: unreadable JSON: {str(exc).split(';')[0]}") from None


def try_parse_document(data: bytes, source: str) -> Document | None:
    """Return the parsed document, or None when the bytes are not JSON or JSON Lines."""
    try:
        return parse_document(data, source)
    except InputFormatError:
        return None


def number(value: Any, source: str, where: str, *, required: bool = True) -> float | None:
    """Return ``value`` as a finite float; raise naming file and field when it is missing or not a number.

    Numbers stored as strings (llmperf dumps numpy ints with ``default=str``) are accepted.
    """
    if value is None:
        if required:
            raise InputFormatError(f"{source}: {where}: missing (expected a number)")
        return None
    if isinstance(value, bool):
        raise InputFormatError(f"{source}: {where}: {value!r} is not a number")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InputFormatError(f"{source}: {where}: {value!r} is not a number") from None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputFormatError(f"{source}: {where}: {value!r} is not a finite number")
    return float(value)


def count(value: Any, source: str, where: str) -> int | None:
    """Return a token count as int (None when absent); raise naming file and field when it is malformed."""
    if value is None:
        return None
    v = number(value, source, where)
    assert v is not None
    if v != int(v) or v < 0:
        raise InputFormatError(f"{source}: {where}: {value!r} is not a non-negative whole number")
    return int(v)


def cached_tokens(usage: Mapping[str, Any], source: str, where: str) -> int | None:
    """Return OpenAI's ``usage.prompt_tokens_details.cached_tokens`` (prefix-cache hits), None when absent."""
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, Mapping):
        return None
    return count(details.get("cached_tokens"), source, f"{where}: usage.prompt_tokens_details.cached_tokens")


def require_mapping(value: Any, source: str, where: str) -> Mapping[str, Any]:
    """Return ``value`` if it is a JSON object, else raise naming file and field."""
    if not isinstance(value, Mapping):
        raise InputFormatError(f"{source}: {where}: expected an object, got {type(value).__name__}")
    return value


def require_list(value: Any, source: str, where: str) -> list[Any]:
    """Return ``value`` if it is a JSON array, else raise naming file and field."""
    if not isinstance(value, list):
        raise InputFormatError(f"{source}: {where}: expected an array, got "
                               f"{'nothing' if value is None else type(value).__name__}")
    return value


def clean_record(rec: dict[str, Any]) -> dict[str, Any]:
    """Drop absent optional fields and keep a success only if it meets the contract.

    A request a tool calls successful but without a first-token time or any output token
    cannot be a success under servebench's contract; it becomes ``failed`` with the reason.
    """
    out = {k: v for k, v in rec.items() if v is not None}
    if out.get("status") == "success":
        problem = None
        if out.get("first_token") is None:
            problem = "no first-token time"
        elif (out.get("output_tokens") or 0) < 1:
            problem = "no output tokens"
        if problem:
            out["status"] = "failed"
            out["error"] = f"reported as successful with {problem}"
    ft = out.get("first_token")
    if ft is not None and not (out["start"] <= ft <= out["end"]) and out.get("status") != "success":
        del out["first_token"]  # a partial stream's first token outside [start, end] is not usable
    return out


def mark_window(records: list[dict[str, Any]], measure_start: float | None, measure_end: float | None,
                outside_window: OutsideWindow) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Label requests that start before/after the measured window ``warmup``/``cooldown`` (or drop them).

    Inside requests get slice ``measured`` only when some request is outside, so a clean file gets no slices.
    A request starting at or after ``measure_end`` is outside (GuideLLM's own rule).
    """
    if outside_window not in OUTSIDE_WINDOW_CHOICES:
        raise InputFormatError(f"outside_window {outside_window!r} must be one of {', '.join(OUTSIDE_WINDOW_CHOICES)}")
    labels = []
    for r in records:
        s = r["start"]
        if measure_start is not None and s < measure_start:
            labels.append("warmup")
        elif measure_end is not None and s >= measure_end:
            labels.append("cooldown")
        else:
            labels.append("measured")
    counts = {name: labels.count(name) for name in ("warmup", "cooldown")}
    if not counts["warmup"] and not counts["cooldown"]:
        return records, counts
    if outside_window == "drop":
        return [r for r, lab in zip(records, labels) if lab == "measured"], counts
    return [{**r, "slice": lab} for r, lab in zip(records, labels)], counts


def window_warning(tool: str, counts: Mapping[str, int], outside_window: OutsideWindow) -> list[str]:
    """Say how many warm-up/cool-down requests were found and what was done with them."""
    parts = [f"{n} {name}" for name, n in counts.items() if n]
    if not parts:
        return []
    what = ("dropped (outside_window='drop')" if outside_window == "drop"
            else "kept and marked with slice 'warmup'/'cooldown' (measured ones: slice 'measured'); "
                 "pass outside_window='drop' (--format NAME:outside_window=drop) to leave them out")
    return [f"{tool}: {' and '.join(parts)} request(s) started outside the tool's measured window; {what}"]


def finish(records: Sequence[dict[str, Any]], source: str, fmt: str, warnings: list[str],
           metadata: dict[str, Any]) -> LoadedRecords:
    """Build LoadedRecords from canonical dicts (validation of times happens later, in ``to_table``)."""
    if not records:
        raise InputFormatError(f"{source}: no requests to import")
    rows = parse_objects([clean_record(dict(r)) for r in records], source, strict_keys=True)
    return LoadedRecords(rows, fmt, list(warnings), dict(metadata))


def pick_run(runs: list[Any], options: ImportOptions, source: str, tool: str, unit: str) -> tuple[int, list[str]]:
    """Return the index of the run to import and a warning when the file holds more than one."""
    n = len(runs)
    if n == 0:
        raise InputFormatError(f"{source}: the {tool} file holds no {unit}s")
    idx = 0 if options.run is None else options.run
    if not 0 <= idx < n:
        raise InputFormatError(f"{source}: run {options.run} does not exist; the file holds {n} {unit}(s), "
                               f"numbered 0 to {n - 1}")
    if n > 1 and options.run is None:
        return idx, [f"{tool}: the file holds {n} {unit}s; imported {unit} 0 only. Choose another with "
                     f"run=N (--format {tool}:run=N) or import_runs() for all of them"]
    return idx, []
