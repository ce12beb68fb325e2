"""Accelerator presets: the public figures the roofline needs, each with its source, and an editable price.

Figures are NVIDIA's datasheet numbers (dense tensor-core throughput, without the 2:4 sparsity
that doubles the headline figure). ``memory_gib`` is what the driver reports as usable (a little
under the marketing "80GB"), because that is what a serving engine can allocate. Interconnect is
the per-GPU bandwidth in one direction for tensor-parallel all-reduce (NVLink, or PCIe where a
card has no NVLink). ``allreduce_latency_s`` is an order-of-magnitude assumption for one small
NCCL all-reduce, not a datasheet figure.

Prices are on-demand list prices per GPU-hour from public price surveys, dated: they move month by
month and differ by a factor of two or more between providers, so they are defaults for the user
to replace (``--price H100=2.10``), never a quote.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servebench.errors import ConfigError

TB = 1e12
GB = 1e9


class Accelerator(BaseModel):
    """One accelerator type's public figures (per device) and a default hourly price."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Short name used on the command line, e.g. H100.")
    full_name: str
    kind: str = Field("gpu", description="gpu or cpu.")
    memory_gib: float = Field(gt=0, description="Device memory a serving engine can use, GiB.")
    memory_bandwidth_bytes_per_s: float = Field(gt=0, description="Peak memory bandwidth, bytes/s.")
    fp16_flops: float = Field(gt=0, description="Dense bf16/fp16 tensor throughput, FLOP/s.")
    fp8_flops: float | None = Field(None, gt=0, description="Dense fp8 throughput, FLOP/s (None: no fp8 units).")
    interconnect_bytes_per_s: float = Field(gt=0, description="Per-GPU link bandwidth, one direction, bytes/s.")
    interconnect: str = Field(description="What the link is (NVLink 4, PCIe Gen4 x16...).")
    allreduce_latency_s: float = Field(ge=0, description="Fixed cost of one small all-reduce, s (assumption).")
    max_tensor_parallel: int = Field(8, ge=1, description="Most GPUs of one server a replica can span.")
    price_usd_per_hour: float = Field(ge=0, description="Default on-demand price per device-hour, USD.")
    price_source: str
    price_date: str = Field(description="When the price was read (YYYY-MM).")
    source: str = Field(description="Where the hardware figures come from.")

    def flops(self, weight_bytes_per_parameter: float) -> float:
        """Return the dense throughput that matmuls with weights of this size run at (fp8 when 1 byte and supported)."""
        if weight_bytes_per_parameter <= 1 and self.fp8_flops is not None:
            return self.fp8_flops
        return self.fp16_flops


_NVIDIA_H100 = "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM5 datasheet)"
_PRICE_SURVEY = ("mercatus-ai.com/blog/cloud-gpu-pricing: on-demand range at specialty GPU clouds, May 2026; "
                 "the middle of the range")

ACCELERATORS: dict[str, Accelerator] = {a.name: a for a in (
    Accelerator(
        name="H100", full_name="NVIDIA H100 SXM5 80GB", memory_gib=79.6,
        memory_bandwidth_bytes_per_s=3.35 * TB, fp16_flops=989e12, fp8_flops=1979e12,
        interconnect_bytes_per_s=450 * GB, interconnect="NVLink 4 (900 GB/s both directions)",
        allreduce_latency_s=10e-6, price_usd_per_hour=2.99, price_source=_PRICE_SURVEY, price_date="2026-05",
        source=_NVIDIA_H100 + "; memory as the driver reports it (81,559 MiB)"),
    Accelerator(
        name="H200", full_name="NVIDIA H200 SXM 141GB", memory_gib=140.4,
        memory_bandwidth_bytes_per_s=4.8 * TB, fp16_flops=989e12, fp8_flops=1979e12,
        interconnect_bytes_per_s=450 * GB, interconnect="NVLink 4 (900 GB/s both directions)",
        allreduce_latency_s=10e-6, price_usd_per_hour=3.99, price_source=_PRICE_SURVEY, price_date="2026-05",
        source="https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM datasheet); memory as the driver "
               "reports it (143,771 MiB)"),
    Accelerator(
        name="A100-80GB", full_name="NVIDIA A100 SXM4 80GB", memory_gib=80.0,
        memory_bandwidth_bytes_per_s=2.039 * TB, fp16_flops=312e12, fp8_flops=None,
        interconnect_bytes_per_s=300 * GB, interconnect="NVLink 3 (600 GB/s both directions)",
        allreduce_latency_s=15e-6, price_usd_per_hour=1.29, price_source=_PRICE_SURVEY, price_date="2026-05",
        source="https://www.nvidia.com/en-us/data-center/a100/ (A100 datasheet, SXM 80GB column)"),
    Accelerator(
        name="A100-40GB", full_name="NVIDIA A100 SXM4 40GB", memory_gib=40.0,
        memory_bandwidth_bytes_per_s=1.555 * TB, fp16_flops=312e12, fp8_flops=None,
        interconnect_bytes_per_s=300 * GB, interconnect="NVLink 3 (600 GB/s both directions)",
        allreduce_latency_s=15e-6, price_usd_per_hour=1.10,
        price_source="assumption: a little under the 80 GB price; public surveys rarely list the 40 GB card "
                     "separately", price_date="2026-05",
        source="https://www.nvidia.com/en-us/data-center/a100/ (A100 datasheet, SXM 40GB column)"),
    Accelerator(
        name="L40S", full_name="NVIDIA L40S 48GB (PCIe)", memory_gib=45.0,
        memory_bandwidth_bytes_per_s=864 * GB, fp16_flops=362e12, fp8_flops=733e12,
        interconnect_bytes_per_s=32 * GB, interconnect="PCIe Gen4 x16, no NVLink",
        allreduce_latency_s=30e-6, price_usd_per_hour=0.86,
        price_source="modal.com/blog/nvidia-l40s-price-article: RunPod on-demand, August 2025 (AWS g6e lists "
                     "$1.86)", price_date="2025-08",
        source="https://www.nvidia.com/en-us/data-center/l40s/ (L40S datasheet; dense figures are half the "
               "sparse ones); memory as the driver reports it (46,068 MiB)"),
    Accelerator(
        name="L4", full_name="NVIDIA L4 24GB (PCIe)", memory_gib=22.5,
        memory_bandwidth_bytes_per_s=300 * GB, fp16_flops=121e12, fp8_flops=242.5e12,
        interconnect_bytes_per_s=32 * GB, interconnect="PCIe Gen4 x16, no NVLink",
        allreduce_latency_s=30e-6, price_usd_per_hour=0.70,
        price_source="assumption: typical on-demand price per L4 in public cloud listings of early 2026; "
                     "check your provider", price_date="2026-05",
        source="https://www.nvidia.com/en-us/data-center/l4/ (L4 datasheet; dense figures are half the sparse "
               "ones); memory as the driver reports it (23,034 MiB)"),
    Accelerator(
        name="CPU", full_name="2-core Intel Xeon (this development machine), fp32", kind="cpu", memory_gib=16.0,
        memory_bandwidth_bytes_per_s=10 * GB, fp16_flops=100e9, fp8_flops=None,
        interconnect_bytes_per_s=10 * GB, interconnect="none (one socket)", allreduce_latency_s=0.0,
        max_tensor_parallel=1, price_usd_per_hour=0.10,
        price_source="assumption: a 2-vCPU cloud VM", price_date="2026-05",
        source="rough estimates for a shared 2-vCPU VM (about 5 GB/s per core of memory bandwidth, AVX2 FMA at "
               "about 50 GFLOP/s per core); calibrate with a timing run (--calibrate) before trusting them"),
)}

ALIASES: dict[str, str] = {
    "h100-sxm": "H100", "h100-80gb": "H100", "h100-sxm5": "H100", "h200-141gb": "H200", "h200-sxm": "H200",
    "a100": "A100-80GB", "a100-80g": "A100-80GB", "a100-40g": "A100-40GB", "l40s-48gb": "L40S", "l4-24gb": "L4",
}

DEFAULT_GPUS: tuple[str, ...] = tuple(n for n, a in ACCELERATORS.items() if a.kind == "gpu")


def get_accelerator(name: str) -> Accelerator:
    """Return a preset by name, case-insensitive (``h100``, ``A100-80GB``, ``a100``...)."""
    key = name.strip().lower()
    by_lower = {n.lower(): n for n in ACCELERATORS}
    key = by_lower.get(key) or ALIASES.get(key, "")
    if not key:
        raise ConfigError(f"unknown GPU {name!r}; presets: {', '.join(ACCELERATORS)}")
    return ACCELERATORS[key]


def accelerator_for_device(device_name: str) -> Accelerator | None:
    """Return the preset a torch device name describes ("NVIDIA H100 80GB HBM3", "cpu"), or None.

    >>> accelerator_for_device("NVIDIA H200").name, accelerator_for_device("cpu").name
    ('H200', 'CPU')
    """
    d = device_name.lower()
    if d == "cpu" or d.startswith("cpu") or "xeon" in d or "epyc" in d:
        return ACCELERATORS["CPU"]
    for token, name in (("h200", "H200"), ("h100", "H100"), ("l40s", "L40S")):
        if token in d:
            return ACCELERATORS[name]
    if "a100" in d:
        return ACCELERATORS["A100-40GB" if "40gb" in d.replace(" ", "") else "A100-80GB"]
    if "l4" in d.split() or d.endswith(" l4"):
        return ACCELERATORS["L4"]
    return None


def with_price(acc: Accelerator, usd_per_hour: float) -> Accelerator:
    """Return a copy with the user's hourly price."""
    if not usd_per_hour >= 0:
        raise ConfigError(f"price for {acc.name} must be a non-negative number of USD per hour, got {usd_per_hour}")
    return acc.model_copy(update={"price_usd_per_hour": usd_per_hour, "price_source": "set by the user",
                                  "price_date": "now"})


def parse_prices(items: list[str]) -> dict[str, float]:
    """Parse ``GPU=USD_PER_HOUR`` items into {preset name: price}.

    >>> parse_prices(["h100=2.5", "L4=0.6"])
    {'H100': 2.5, 'L4': 0.6}
    """
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--price {item!r}: expected GPU=USD_PER_HOUR, like H100=2.50")
        try:
            price = float(value)
        except ValueError:
            raise ConfigError(f"--price {item!r}: {value!r} is not a number of USD per hour") from None
        if not price >= 0 or price == float("inf"):
            raise ConfigError(f"--price {item!r}: the price must be a finite, non-negative number")
        out[get_accelerator(name).name] = price
    return out
