"""Memory settings of the CLI: keep freed large arrays for reuse, and fault memory in small pages, not huge ones.

glibc's malloc serves every block above 32 MB (an array of 4M floats) with a new ``mmap`` and unmaps it
when freed, so each temporary column of a 10M-record report costs the kernel a page fault and a zeroing
per page; on a virtual machine that is half the report's CPU time (``benchmarks/summary.py``, system
time). The CLI is a short-lived process, so it asks malloc to take large blocks from its heap and keep
what is freed. The dashboard, a long-lived server, does not.

numpy asks for transparent huge pages on every large array (``madvise(MADV_HUGEPAGE)``); on this 2-core
virtual machine a huge page's first fault cost several times the same memory in small pages: a whole
``servebench summarize`` of 10M records spent 2.6-5.1 s of system time faulting in 2.3 GB of huge pages,
and 1.5-1.7 s with them off for the process (DuckDB's query, which takes none, 0.9-1.3 s), for the same
user time. A report touches each new array once or twice, too few times for the fewer TLB misses of a
huge page to pay for it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from typing import Any

_PR_SET_THP_DISABLE = 41  # prctl(2): no transparent huge pages for this process (and its children)
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_MAX = -4
_MMAP_MAX_DEFAULT = 65536  # glibc's own limit on mapped blocks
_M_MMAP_THRESHOLD = -3
_MAPPED_FROM_BYTES = 8 * 2**20  # blocks from 8 MiB are mapped: 4 MiB mapped the report's chunk temporaries (21 s of page faults at 1M)
# freed heap kept for reuse: enough for a 10M-record report's temporaries; more only raises the peak
# (holes left by freed blocks are not given back), measured 2.46 GB at 10M with 512 MiB, 2.6 GB with 2 GiB
_TRIM_THRESHOLD_BYTES = 512 * 2**20


def reuse_freed_memory() -> bool:
    """Ask glibc malloc to serve large blocks from its heap and keep freed ones; return True if it agreed.

    Does nothing on other C libraries (musl, macOS) or where libc cannot be loaded.
    """
    mallopt = _glibc_mallopt()
    return mallopt is not None and bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES))


def no_huge_pages() -> bool:
    """Ask Linux to fault this process's memory in small pages, whatever ``madvise`` asks; return True if it agreed.

    Does nothing off Linux or where libc cannot be loaded. Children started afterwards inherit it.
    """
    if platform.system() != "Linux" or (prctl := _libc("prctl")) is None:
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0


def _glibc_mallopt() -> Any:
    """Return glibc's ``mallopt(int, int)``, or None off Linux, on another C library or where libc cannot be loaded."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or (mallopt := _libc("mallopt")) is None:
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def _libc(function: str) -> Any:
    """Return one of the C library's functions, or None where libc cannot be loaded or lacks it."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), function)
    except (OSError, AttributeError):
        return None


def map_large_blocks() -> bool:
    """Undo :func:`reuse_freed_memory`: large blocks come from ``mmap`` again and go back when freed; True if agreed.

    ``servebench simulate`` holds a few very large arrays (a million requests: 23 million token ticks) that
    grow in place and are dropped between its phases; served from the heap they could not be grown without a
    copy nor given back, and its peak was 1.25 GB where mapped blocks keep it under 1 GB. Its report is a
    small part of its time, so the faults it saves there matter less.
    """
    mallopt = _glibc_mallopt()
    return mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, _MAPPED_FROM_BYTES)) \
        and bool(mallopt(_M_MMAP_MAX, _MMAP_MAX_DEFAULT))
