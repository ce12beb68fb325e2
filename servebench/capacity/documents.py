"""Read a configuration document (a model's config.json, a scenario's YAML or JSON) strictly.

JSON and YAML both keep the last value of a key given twice, so a typo'd copy of a key silently
wins; here a repeated key is refused, naming the file, the key (and the YAML line). A document
nested deeper than Python's parser can follow is refused as one line, not a RecursionError, and
:func:`check_values` names the first number that is not finite (YAML's ``.inf``, JSON's ``NaN``)
and any nesting deeper than ``MAX_NESTING`` levels (no configuration here needs ten).
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml
from pydantic import ValidationError

from servebench.errors import ConfigError, ServebenchError

MAX_NESTING = 64  # levels of mappings and lists in a configuration document


class _RepeatedKey(Exception):
    def __init__(self, key: Any, line: int | None = None, first_line: int | None = None) -> None:
        super().__init__(key)
        self.key, self.line, self.first_line = key, line, first_line


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        raise _RepeatedKey(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return obj


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (merge keys, ``<<``, may be overridden)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in first:
                raise _RepeatedKey(key, line, first[key])
            first[key] = line
        return super().construct_mapping(node, deep=deep)


def read_json(text: str, name: str, *, what: str = "valid JSON",
              error: type[ServebenchError] = ConfigError) -> Any:
    """Parse JSON text; a repeated key, a syntax error or too deep a nesting is one ``error`` naming ``name``.

    ``what`` words a syntax error: ``{name}: not {what}: ...``.

    >>> read_json('{"a": 1, "a": 2}', "config.json")
    Traceback (most recent call last):
    ...
    servebench.errors.ConfigError: config.json: key 'a' appears twice in one object (JSON would keep only the last value)
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _RepeatedKey as exc:
        raise error(f"{name}: key {exc.key!r} appears twice in one object (JSON would keep only the last "
                    "value)") from None
    except json.JSONDecodeError as exc:
        raise error(f"{name}: not {what}: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise error(f"{name}: not {what}: nested too deeply to read") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise error(f"{name}: not {what}: {str(exc).split(';')[0]}") from None


def read_yaml(text: str, name: str) -> Any:
    """Parse YAML text safely; a repeated key, a syntax error or too deep a nesting is one ConfigError.

    >>> read_yaml("a: 1\\nb: 2\\na: 3\\n", "s.yaml")
    Traceback (most recent call last):
    ...
    servebench.errors.ConfigError: s.yaml, line 3: key 'a' appears twice in one mapping (first on line 1; YAML would keep only the last value)
    """
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except _RepeatedKey as exc:
        raise ConfigError(f"{name}, line {exc.line}: key {exc.key!r} appears twice in one mapping (first on line "
                          f"{exc.first_line}; YAML would keep only the last value)") from None
    except RecursionError:
        raise ConfigError(f"{name}: not valid YAML: nested too deeply to read") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML: {' '.join(str(exc).split())}") from None


def read_document(text: str, name: str) -> Any:
    """Parse a document as JSON when ``name`` ends in .json, else as YAML (see :func:`read_json`, :func:`read_yaml`)."""
    return read_json(text, name) if name.lower().endswith(".json") else read_yaml(text, name)


def check_values(data: Any, name: str) -> None:
    """Raise ConfigError naming the first number that is not finite, or nesting past ``MAX_NESTING`` levels.

    Each container is visited once, so YAML aliases that repeat one list many times cost nothing.

    >>> check_values({"server": {"timeout_s": float("inf")}}, "s.yaml")
    Traceback (most recent call last):
    ...
    servebench.errors.ConfigError: s.yaml, field 'server.timeout_s': inf is not a finite number
    """
    seen: set[int] = set()
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise ConfigError(f"{name}, field '{_dotted(path)}': {node} is not a finite number")
        if not isinstance(node, (dict, list)) or id(node) in seen:
            continue
        seen.add(id(node))
        if len(path) >= MAX_NESTING:
            raise ConfigError(f"{name}, field '{_dotted(path)}': nested deeper than {MAX_NESTING} levels")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        stack.extend((value, (*path, key)) for key, value in reversed(list(items)))


def _dotted(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def as_tuple(value: Any) -> Any:
    """Return a list as a tuple (a document's lists fill tuple fields under strict validation); else unchanged.

    >>> as_tuple([1, 2]), as_tuple("ab")
    ((1, 2), 'ab')
    """
    return tuple(value) if isinstance(value, list) else value


def validation_line(source: str, exc: ValidationError) -> str:
    """Return a pydantic refusal as one line: the source, the first field refused, why, and its value.

    >>> from pydantic import BaseModel, Field
    >>> class Limits(BaseModel):
    ...     seqs: int = Field(ge=1)
    >>> try:
    ...     Limits(seqs=0)
    ... except ValidationError as exc:
    ...     print(validation_line("limits.yaml", exc))
    limits.yaml, field 'seqs': Input should be greater than or equal to 1, got 0
    """
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    value = first.get("input")
    got = f", got {_shown(value)}" if _scalar(value) and first["type"] != "missing" else ""
    more = f" ({exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{source}, field '{where}': {first['msg']}{got}{more}"


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
