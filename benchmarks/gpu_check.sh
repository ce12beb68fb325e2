#!/usr/bin/env bash
# The prepared GPU check: a timing run of a real-model-shaped preset on CUDA, its summary, the
# simulator's validation against it, and a measured-vs-simulated sweep. One command, about 6 minutes
# on one modern GPU; the figures go to benchmarks/results/gpu_check_*.json:
#
#   bash benchmarks/gpu_check.sh                     # llama-3.2-1b shape, bf16, ~60 s of load
#
# Steps: (1) cached decode vs full recompute on the GPU (bf16, so agreement is reported, not
# asserted); (2) servebench run of an open-loop Poisson chat workload below saturation;
# (3) servebench validate (fit the step model to the trace, simulate, compare p50/p95);
# (4) servebench validate-sweep at SWEEP_RATES, SWEEP_REQUESTS each (the knee both ways).
# Overrides (environment): MODEL, DEVICE, RATE, REQUESTS, PROMPT_LOW, PROMPT_HIGH, OUT_LOW,
# OUT_HIGH, KV_TOKENS, OUT, SWEEP_RATES, SWEEP_REQUESTS, RESULTS. A CPU dry run of the same script:
#   MODEL=tiny DEVICE=cpu RATE=8 REQUESTS=30 PROMPT_HIGH=400 OUT_HIGH=64 SWEEP_RATES=5,20 SWEEP_REQUESTS=20 \
#     RESULTS=/tmp/gpu_check_dry bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
MODEL=${MODEL:-llama-3.2-1b}
DEVICE=${DEVICE:-cuda}
RATE=${RATE:-10}
REQUESTS=${REQUESTS:-600}
PROMPT_LOW=${PROMPT_LOW:-128}
PROMPT_HIGH=${PROMPT_HIGH:-1536}
OUT_LOW=${OUT_LOW:-32}
OUT_HIGH=${OUT_HIGH:-256}
KV_TOKENS=${KV_TOKENS:-131072}
OUT=${OUT:-out/gpu_check}
SWEEP_RATES=${SWEEP_RATES:-5,10,20,40}
SWEEP_REQUESTS=${SWEEP_REQUESTS:-150}
RESULTS=${RESULTS:-benchmarks/results}
mkdir -p "$RESULTS"
SCENARIO=$(mktemp -t servebench_gpu_XXXXXX.yaml)
trap 'rm -f "$SCENARIO"' EXIT

# hang guards only (a healthy run takes about 2-3 minutes): the timing run stops itself at --max-wall-s
T=""
command -v timeout >/dev/null 2>&1 && T="timeout"

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L || true
echo "== 1/4 cached decode vs full recompute ($MODEL on $DEVICE)"
${T:+$T 120} "$PY" - <<EOF
import torch
print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}")
from servebench.serving.engine.model import Decoder, configure_cpu, pick_device, preset
from servebench.serving.engine.executor import Executor, ComputePlan
from servebench.serving.engine.kvcache import PagedKVCache
configure_cpu(1)
dev, dtype = pick_device("$DEVICE")
cfg = preset("$MODEL")
model = Decoder(cfg, seed=0, device=dev, dtype=dtype)
ex = Executor(model, PagedKVCache(cfg, 256, device=dev, dtype=dtype))
prompt = torch.randint(0, cfg.vocab, (64,), generator=torch.Generator().manual_seed(1)).tolist()
ex.add("c", prompt, 8)
steps = [ex.execute(ComputePlan(prefill=(("c", 64),)), keep_logits=True).logits["c"]]
while not ex.sequences["c"].done:
    steps.append(ex.execute(ComputePlan(decode=("c",)), keep_logits=True).logits["c"])
tokens = ex.sequences["c"].tokens
full = model.forward_full(torch.tensor(tokens, device=dev)).cpu()
ref = full[63:63 + len(steps)]
cached = torch.stack(steps)
rel = ((cached - ref).abs().max() / ref.std()).item()
agree = (cached.argmax(-1) == ref.argmax(-1)).float().mean().item()
print(f"{cfg.name} ({cfg.param_count:,} parameters, {dtype}) on {dev}: cached decode vs full recompute: "
      f"max |logit diff| = {rel:.3g} logit std, next-token agreement {agree:.0%}")
EOF

cat > "$SCENARIO" <<EOF
name: gpu_check_${MODEL}
description: "$MODEL on $DEVICE: Poisson chat requests below saturation, paged KV, chunked prefill"
seed: 21
server:
  policy: paged
  kv_budget_tokens: $KV_TOKENS
  max_num_seqs: 64
  max_num_batched_tokens: 2048
  chunked_prefill: true
  max_waiting: 256
  timeout_s: 60
step_model: {base_s: 0.01}
workload:
  arrival: {kind: poisson, rate_rps: $RATE}
  num_requests: $REQUESTS
  classes:
    - name: chat
      prompt: {kind: uniform, low: $PROMPT_LOW, high: $PROMPT_HIGH}
      output: {kind: uniform, low: $OUT_LOW, high: $OUT_HIGH}
      max_output_tokens: $OUT_HIGH
EOF

echo "== 2/4 timing run: $REQUESTS Poisson requests at $RATE/s"
${T:+$T 260} "$PY" -m servebench run "$SCENARIO" -o "$OUT" --model "$MODEL" --device "$DEVICE" --max-wall-s 180
echo "== 3/4 validation: the simulator with the step model fitted to this run"
${T:+$T 90} "$PY" -m servebench validate "$OUT" --allow-poor-fit
${T:+$T 90} "$PY" -m servebench validate "$OUT" --allow-poor-fit --json > "$RESULTS/gpu_check_validate.json"
echo "== 4/4 validate-sweep: $SWEEP_REQUESTS requests at each of $SWEEP_RATES requests/s"
${T:+$T 300} "$PY" -m servebench validate-sweep "$SCENARIO" --rates "$SWEEP_RATES" --requests "$SWEEP_REQUESTS" \
  --long --model "$MODEL" --device "$DEVICE" --allow-poor-fit -o "$OUT/sweep"
cp "$OUT/sweep/validate_sweep.json" "$RESULTS/gpu_check_validate_sweep.json"
cp "$OUT/metadata.json" "$RESULTS/gpu_check_metadata.json"
echo "records, step trace and run metadata: $OUT/; figures: $RESULTS/gpu_check_*.json"
