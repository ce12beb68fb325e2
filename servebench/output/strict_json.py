"""Strict JSON for every ``--json`` output and summary file: no ``NaN`` or ``Infinity`` tokens.

The rule, everywhere servebench writes JSON for machines:

* +infinity is the string ``"Infinity"`` and -infinity ``"-Infinity"`` (a failure-aware percentile
  that lands on a non-success is +infinity: the string keeps "worse than any time" apart from
  "no data");
* NaN (undefined) is ``null``, as is "no data".

So ``json.loads`` in any language reads the output, and a strict parser never meets a bare
``Infinity`` or ``NaN`` token.

>>> dumps({"p99": float("inf"), "mean": float("nan"), "n": 3})
'{"p99": "Infinity", "mean": null, "n": 3}'
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from enum import Enum
from pathlib import PurePath
from typing import Any

import numpy as np
from pydantic import BaseModel

POS_INFINITY = "Infinity"
NEG_INFINITY = "-Infinity"


def jsonable(obj: Any) -> Any:
    """Return ``obj`` as plain JSON data (dict, list, str, int, float, bool, None) under the rule above.

    Pydantic models are dumped in JSON mode, numpy scalars and arrays become Python numbers and
    lists, tuples and sets become lists, paths become strings.
    """
    if obj is None or isinstance(obj, (bool, str, int)) and not isinstance(obj, Enum):
        return obj
    if isinstance(obj, float):
        return _float(obj)
    if isinstance(obj, BaseModel):
        return jsonable(obj.model_dump(mode="json"))
    if isinstance(obj, Mapping):
        return {_key(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, Enum):
        return jsonable(obj.value)
    if isinstance(obj, PurePath):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    raise TypeError(f"cannot write a {type(obj).__name__} as JSON")


def dumps(obj: Any, *, indent: int | None = None) -> str:
    """Return strict JSON text for ``obj`` (see :func:`jsonable`); never a NaN or Infinity token."""
    return json.dumps(jsonable(obj), indent=indent, allow_nan=False)


def _float(x: float) -> float | str | None:
    if math.isnan(x):
        return None
    if math.isinf(x):
        return POS_INFINITY if x > 0 else NEG_INFINITY
    return float(x)  # a float subclass (numpy's float64) becomes a plain float


def _key(k: Any) -> str | int | float | bool | None:
    """Return a mapping key json.dumps accepts (it turns numbers into strings itself)."""
    if isinstance(k, (str, int, bool)) or k is None:
        return k
    if isinstance(k, float):
        v = _float(k)
        return "null" if v is None else v
    if isinstance(k, np.generic):
        return _key(k.item())
    return str(k)
