"""KV calculator: a model's KV bytes per token, what a memory budget holds, and the concurrency limit it sets."""

from __future__ import annotations

import json

import streamlit as st

from pages._figures import concurrency_chart
from pages._shared import SAMPLE_DIR, fail, guarded
from servebench.capacity import kv
from servebench.capacity.hf_config import shape_from_config
from servebench.capacity.model_presets import PRESETS, get_preset
from servebench.dashboard.answers import gib_text, kv_answer, kv_load_answer
from servebench.dashboard.wording import ms_to_s
from servebench.errors import InputFormatError
from servebench.formatting import fmt, fmt_share
from servebench.output.figures.summary import concurrency_by_prompt

st.title("KV calculator")
st.caption("How many requests of a size fit in a GPU's KV cache at once. KV bytes ≈ 2 × layers × KV heads × head "
           "dimension × cached tokens × bytes per element (per GPU; MLA, sliding windows, tensor parallelism and "
           "paged blocks accounted for).")
answer = st.container()  # the answer leads; it is written once the inputs below are read

st.subheader("Model shape")
how = st.radio("Shape from", ["Preset", "config.json", "Manual"], horizontal=True, key="shape_from")
if how == "Preset":
    name = st.selectbox("Model", list(PRESETS), index=list(PRESETS).index("llama-3.1-8b"), key="preset")
    base = guarded(get_preset, name)
elif how == "config.json":
    c1, c2 = st.columns(2)
    up = c1.file_uploader("Upload a Hugging Face config.json", type=["json"], key="config_upload")
    configs = sorted(p.name for p in (SAMPLE_DIR / "configs").glob("*.json"))
    sample = c2.selectbox("…or a sample config", configs, key="config_sample")
    name, data = (up.name, up.getvalue()) if up is not None else (sample, (SAMPLE_DIR / "configs" / sample).read_bytes())
    try:
        cfg = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        fail(InputFormatError(f"{name}: not a JSON config ({exc})"))
    base = guarded(shape_from_config, cfg, name=name.removesuffix(".json"), source=name)
else:
    c1, c2, c3 = st.columns(3)
    layers = c1.number_input("Layers", min_value=1, value=32, step=1, key="layers")
    kv_heads = c2.number_input("KV heads (not query heads)", min_value=1, value=8, step=1, key="kv_heads")
    head_dim = c3.number_input("Head dimension", min_value=1, value=128, step=1, key="head_dim")
    base = kv.ModelShape(name="manual", layers=int(layers), kv_heads=int(kv_heads), head_dim=int(head_dim))

c1, c2, c3, c4 = st.columns(4)
dtype = c1.selectbox("KV dtype", ["model's", *kv.DTYPE_BYTES], key="dtype",
                     format_func=lambda d: f"model's ({fmt(base.bytes_per_element)} bytes)" if d == "model's" else d)
shape = base if dtype == "model's" else base.model_copy(update={"bytes_per_element": kv.dtype_bytes(dtype)})
tp = int(c2.number_input("Tensor parallelism (GPUs)", min_value=1, value=1, step=1, key="tp"))
policy = c3.radio("Admission policy", ["reserve", "paged"], key="policy",
                  help="reserve: prompt + full output cap at admission (the spec's scheduler). "
                       "paged: whole blocks for the tokens actually held.")
block_size = int(c4.number_input("Block size (tokens)", min_value=1, value=kv.DEFAULT_BLOCK_SIZE, step=1,
                                 key="block_size", disabled=policy != "paged"))
desc = (f"{shape.layers} layers, {shape.kv_heads} KV heads, head dim {shape.head_dim}, "
        f"{fmt(shape.bytes_per_element)} bytes per element")
if shape.is_mla:
    desc += f"; MLA latent {shape.kv_lora_rank} + rope {shape.qk_rope_head_dim}"
if shape.sliding_window:
    desc += f"; {shape.local_layers} sliding-window layers of {shape.sliding_window:,} tokens"
st.caption(desc + (f" · source: {shape.source}" if shape.source else ""))

st.subheader("Budget and request")
c1, c2 = st.columns(2)
with c1:
    budget_how = st.radio("KV budget", ["Direct", "From GPU memory"], horizontal=True, key="budget_how")
    if budget_how == "Direct":
        budget_gib = st.number_input("Memory left for the KV cache (GiB per GPU)", min_value=0.01, value=8.0,
                                     step=1.0, key="budget_gib")
        budget_bytes = int(budget_gib * kv.GIB)
    else:
        g1, g2 = st.columns(2)
        device_gib = g1.number_input("GPU memory (GiB)", min_value=1.0, value=80.0, step=8.0, key="device_gib")
        util = g2.number_input("Memory utilization", min_value=0.05, max_value=1.0, value=0.9, step=0.05,
                               key="util")
        params_b = g1.number_input("Parameters (billions)", min_value=0.0, step=1.0, key="params_b",
                                   value=(shape.parameters or 0) / 1e9)
        bpp = g2.number_input("Bytes per weight parameter", min_value=0.25, value=2.0, step=0.5, key="bpp")
        overhead_gib = g1.number_input("Overhead: activations, buffers (GiB)", min_value=0.0, value=2.0, step=0.5,
                                       key="overhead_gib")
        weights = guarded(kv.weight_bytes, int(params_b * 1e9), bpp, tensor_parallel=tp)
        budget_bytes = guarded(kv.kv_budget_bytes, device_gib * kv.GIB, memory_utilization=util,
                               weights_bytes=weights, overhead_bytes=overhead_gib * kv.GIB,
                               tensor_parallel=tp)  # so the fix names the setting above, as the CLI does
        st.caption(f"Weights {fmt(weights / kv.GIB)} GiB per GPU → KV budget {fmt(budget_bytes / kv.GIB)} GiB per GPU")
with c2:
    r1, r2 = st.columns(2)
    prompt = int(r1.number_input("Prompt tokens", min_value=0, value=7800, step=100, key="prompt"))
    cap = int(r2.number_input("Output cap (tokens)", min_value=1, value=200, step=10, key="cap"))
    expected = None
    if policy == "paged":
        expected = int(r1.number_input("Expected output tokens", min_value=0, max_value=cap, value=cap, key="expected"))

st.subheader("Little's law")
c1, c2, c3, c4 = st.columns(4)
rate = c1.number_input("Arrival rate (requests/s)", min_value=0.0, value=1.0, step=0.1, key="rate")
prefill_ms = c2.number_input("Prefill p50 (ms)", min_value=0.0, value=1200.0, step=50.0, key="prefill_ms",
                             help="Time the server spends reading one prompt before its first token (median).")
tpot_ms = c3.number_input("Request TPOT p50 (ms)", min_value=0.0, value=31.0, step=1.0, key="tpot_ms",
                          help="Time per output token: the pace at which the rest of one answer streams (median).")
prefill, tpot = ms_to_s(prefill_ms), ms_to_s(tpot_ms)  # exact: 31.1 ms is 0.0311 s
out_n = int(c4.number_input("Output tokens N", min_value=1, value=cap, step=10, key="out_n"))
w = guarded(kv.time_in_service_s, prefill, tpot, out_n)

res = guarded(kv.analyze, shape, tensor_parallel=tp, budget_bytes=budget_bytes, prompt_tokens=prompt,
              output_cap=cap, policy=policy, expected_output_tokens=expected, block_size=block_size,
              rate_per_s=rate, time_in_service_s=w)

with answer:  # one input (the request: prompt and output), one answer
    (st.success if res.max_concurrent_sequences else st.error)(f"**{kv_answer(res)}**")
    load = kv_load_answer(res)
    if load:
        (st.warning if res.utilization is not None and res.utilization >= 0.8 else st.info)(
            load + (" Expect queueing while the limit is held." if res.utilization >= 0.8 else ""))
    with st.expander("The numbers behind it"):
        c = st.columns(3)  # five across cut 'Max concurrent sequences' off at 1,400 px
        c[0].metric("KV bytes per token", fmt(res.bytes_per_token),
                    help="GPU memory one token of context takes in the KV cache, per GPU, below any sliding window.")
        c[1].metric("Tokens per request", fmt(res.tokens_per_request),
                    help="What one request holds: its prompt plus its output cap (reserve), or whole blocks for its "
                         "prompt and expected output (paged).")
        c[2].metric("KV per request", gib_text(res.bytes_per_request),
                    help=f"{fmt(res.bytes_per_request)} bytes: tokens per request × KV bytes per token.")
        c = st.columns(3)
        c[0].metric("Tokens in the budget", fmt(res.budget_tokens),
                    help=f"How many tokens of KV the budget holds: {fmt(budget_bytes)} bytes per GPU.")
        c[1].metric("Max concurrent sequences", fmt(res.max_concurrent_sequences),
                    help="How many requests fit in the KV cache at once: tokens in the budget ÷ tokens per request, "
                         "rounded down.")
        c = st.columns(4)
        c[0].metric("Time in service (s)", fmt(w), help="How long one request is held: prefill + (N - 1) × TPOT.")
        c[1].metric("Average in service", fmt(res.in_service),
                    help="Requests being worked on at once, on average (Little's law: rate × time in service).")
        c[2].metric("Utilization of the limit", fmt_share(res.utilization),
                    help="Average in service ÷ max concurrent sequences; waits rise sharply as it nears 100%.")
        c[3].metric("Saturation rate (requests/s)", fmt(res.saturation_rate_per_s),
                    help="The arrival rate at which the average in service reaches the limit.")

st.subheader("The limit against prompt length")
if res.max_concurrent_sequences:
    curve = guarded(concurrency_by_prompt, shape, budget_bytes, prompt, cap, policy=policy,
                    expected_output_tokens=expected, block_size=block_size, tensor_parallel=tp)
    st.vega_lite_chart(spec=concurrency_chart(curve), key="kv_curve")
else:
    st.caption("No chart: not one request of this size fits in the budget.")

st.subheader("Shared prefix held once (prefix caching)")
st.caption("When prompts begin with the same document or system prompt, a prefix cache keeps its full blocks once; "
           "each request then holds only the rest of its prompt and its output.")
c1, c2 = st.columns(2)
shared = int(c1.number_input("Shared prefix (tokens)", min_value=0, max_value=prompt, value=min(7000, prompt),
                             step=100, key="shared_prefix"))
groups = int(c2.number_input("Distinct shared prefixes held", min_value=1, value=1, step=1, key="shared_groups"))
fit = guarded(kv.shared_prefix_concurrency, res.budget_tokens, prompt, cap, shared, groups=groups, policy=policy,
              expected_output_tokens=expected, block_size=kv.DEFAULT_BLOCK_SIZE if policy == "reserve" else block_size)
c = st.columns(3)
c[0].metric("Max concurrent sequences, prefix per request", fmt(fit.max_sequences_unshared),
            help="How many requests fit at once when each holds its own copy of the shared prefix (no cache).")
c[1].metric("Max concurrent sequences, prefix held once", fmt(fit.max_sequences_shared),
            delta=fit.max_sequences_shared - fit.max_sequences_unshared,
            help="How many fit when the shared prefix's full blocks are held once for all (a prefix cache).")
c[2].metric("Tokens per request beyond the shared blocks", fmt(fit.tokens_per_request_shared),
            help=f"{fmt(fit.shared_tokens_held)} tokens of shared blocks held once "
                 f"(full {kv.DEFAULT_BLOCK_SIZE if policy == 'reserve' else block_size}-token blocks only).")
