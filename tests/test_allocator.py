"""servebench.cli.allocator: after the CLI's malloc setting, a freed large array's pages are reused."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

PROBE = """
import json, resource, sys
import numpy as np
if sys.argv[1] in ("tuned", "mapped"):
    from servebench.cli.allocator import reuse_freed_memory
    assert reuse_freed_memory()
if sys.argv[1] == "mapped":
    from servebench.cli.allocator import map_large_blocks
    assert map_large_blocks()
def faults_of_one_array():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(12_000_000)  # 96 MB: past glibc's largest mmap threshold
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    del a
    return after - before
first = faults_of_one_array()
print(json.dumps([first, faults_of_one_array(), faults_of_one_array()]))
"""


def _faults(mode: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_large_arrays_are_reused_only_after_the_setting() -> None:
    first, *again = _faults("tuned")
    assert first > 0
    assert max(again) <= first // 4  # the heap hands back the pages it already has
    plain_first, *plain_again = _faults("plain")
    assert min(plain_again) > plain_first // 4  # by default each array is a fresh mapping, faulted anew


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_simulate_maps_large_blocks_again_so_that_freed_ones_go_back() -> None:
    first, *again = _faults("mapped")
    assert first > 0 and min(again) > first // 4  # a fresh mapping each time: the freed one went back


HUGE_PROBE = """
import sys
import numpy as np
if sys.argv[1] == "small":
    from servebench.cli.allocator import no_huge_pages
    assert no_huge_pages()
a = np.ones(64_000_000)  # 512 MB, touched: numpy asks for huge pages on an array this large
rollup = open("/proc/self/smaps_rollup").read().split("\\n")
print(next(int(line.split()[1]) for line in rollup if line.startswith("AnonHugePages:")))
"""


def _huge_kib(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", HUGE_PROBE, mode], capture_output=True, text=True, check=True, timeout=120)
    return int(out.stdout.strip())


def _thp_mode() -> str:
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return "absent"
    return text[text.index("[") + 1:text.index("]")]


@pytest.mark.skipif(_thp_mode() not in ("always", "madvise"), reason="this kernel gives no transparent huge pages")
def test_after_the_setting_a_large_array_is_faulted_in_small_pages() -> None:
    if _huge_kib("default") == 0:  # numpy asks for huge pages; the kernel gives them only while it has some free
        pytest.skip("the kernel had no free huge page to give: nothing to turn off")
    assert _huge_kib("small") == 0
