"""A page's settings in the URL query, so a link (or a reload) reopens the same view."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st


def seed(key: str, param: str, cast: Callable[[str], Any], default: Any) -> None:
    """Give widget ``key`` its first value: the URL's ``param`` if valid, else ``default``.

    Call before drawing the widget, and draw it without ``value=`` (the state holds it).
    """
    if key in st.session_state:
        return
    value = default
    if param in st.query_params:
        try:
            value = cast(st.query_params[param])
        except (ValueError, TypeError):
            value = default
    st.session_state[key] = value


def keep(param: str, value: Any, default: Any = None) -> None:
    """Write a setting to the URL, or drop it when it is unset or the default (a short link)."""
    if value is None or value == default:
        if param in st.query_params:
            del st.query_params[param]
    else:
        st.query_params[param] = value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) \
            else str(value)


def one_of(options: Sequence[Any]) -> Callable[[str], Any]:
    """Return a cast that accepts only one of ``options`` (matched by its text)."""
    by_text = {str(o): o for o in options}

    def cast(text: str) -> Any:
        if text not in by_text:
            raise ValueError(f"{text!r} is not an option")
        return by_text[text]

    return cast


def positive(cast: Callable[[str], Any]) -> Callable[[str], Any]:
    """Return ``cast`` that also refuses a value at or below zero."""
    def checked(text: str) -> Any:
        value = cast(text)
        if not value > 0:
            raise ValueError(f"{text!r} is not positive")
        return value

    return checked
