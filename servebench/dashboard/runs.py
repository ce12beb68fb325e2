"""Which held record sets Compare offers, and the order that puts the chosen baseline first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

SAMPLE = "sample"  # the origin of a file shipped in sample_data/


def comparable(origins: Mapping[str, str], *, with_samples: bool) -> list[str]:
    """Return the held record sets Compare offers: the user's own in the order opened, then samples.

    ``origins`` maps each held set's key to where it came from ("sample", "upload", "timing run").
    Once the user has a record set of their own, the samples (the default one is opened on the
    first visit) leave the comparison unless ``with_samples``: a delta against an unrelated file
    means nothing. With nothing of their own, the samples are all there is to compare.

    >>> comparable({"s": "sample", "a": "upload", "b": "timing run"}, with_samples=False)
    ['a', 'b']
    >>> comparable({"s": "sample", "a": "upload"}, with_samples=True)
    ['a', 's']
    >>> comparable({"s": "sample", "t": "sample"}, with_samples=False)
    ['s', 't']
    """
    own = [key for key, origin in origins.items() if origin != SAMPLE]
    if own and not with_samples:
        return own
    return own + [key for key, origin in origins.items() if origin == SAMPLE]


def baseline_first(chosen: Sequence[str], baseline: str) -> list[str]:
    """Return ``chosen`` with ``baseline`` first and the others in their order (the baseline must be chosen).

    >>> baseline_first(["a", "b", "c"], "b")
    ['b', 'a', 'c']
    """
    if baseline not in chosen:
        raise ValueError(f"the baseline {baseline!r} is not among the runs chosen")
    return [baseline, *(key for key in chosen if key != baseline)]
