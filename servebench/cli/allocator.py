"""Keep freed large arrays in the process for reuse, so a big report does not zero fresh pages again and again.

glibc's malloc serves every block above 32 MB (an array of 4M floats) with a new ``mmap`` and unmaps it
when freed, so each temporary column of a 10M-record report costs the kernel a page fault and a zeroing
per page; on a virtual machine that is half the report's CPU time (``benchmarks/summary.py``, system
time). The CLI is a short-lived process, so it asks malloc to take large blocks from its heap and keep
what is freed. The dashboard, a long-lived server, does not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_MAX = -4
# freed heap kept for reuse: enough for a 10M-record report's temporaries; more only raises the peak
# (holes left by freed blocks are not given back), measured 2.46 GB at 10M with 512 MiB, 2.6 GB with 2 GiB
_TRIM_THRESHOLD_BYTES = 512 * 2**20


def reuse_freed_memory() -> bool:
    """Ask glibc malloc to serve large blocks from its heap and keep freed ones; return True if it agreed.

    Does nothing on other C libraries (musl, macOS) or where libc cannot be loaded.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES))
