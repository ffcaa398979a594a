#!/usr/bin/env bash
# Activation checkpointing: one model trained a few steps with activation_checkpointing none,
# selective and full, side by side: activation bytes kept (report memory.breakdown.activations),
# step time p50 and tokens/s, each as a ratio to `none` from the same invocation.
# Usage: scripts/bench_recompute.sh [STEPS]   Env: BUILD_DIR (default build/), L, C, T, B.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
steps=${1:-8}
cmake --build "$build" --target trainer -j "$(nproc)" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
L=${L:-12} C=${C:-256} T=${T:-512} B=${B:-4}
for mode in none selective full; do
  "$build/trainer" train "$root/configs/tiny.yaml" --set model.n_layer=$L --set model.d_model=$C \
    --set model.n_head=8 --set model.seq_len=$T --set train.micro_batch=$B \
    --set train.steps=$steps --set train.warmup_steps=1 --set train.eval_every=0 \
    --set activation_checkpointing=$mode --out "$out/$mode" >"$out/$mode.log" 2>&1 \
    || { cat "$out/$mode.log"; exit 1; }
done
/usr/bin/python3 - "$out" "$L" "$C" "$T" "$B" <<'PY'
import json, sys
out, L, C, T, B = sys.argv[1:]
r = {m: json.load(open(f"{out}/{m}/report.json")) for m in ("none", "selective", "full")}
print(f"L {L}, d_model {C}, seq {T}, micro_batch {B}, {r['none']['model']['params']} params, fp32, 1 process")
print(f"{'mode':10} {'activation MiB':>15} {'(ratio)':>8} {'step p50 ms':>12} {'(ratio)':>8} {'tokens/s':>9}")
base = r["none"]
for m, d in r.items():
    a = d["memory"]["breakdown"]["activations"]
    s = d["throughput"]["step_time_s"]["p50"]
    print(f"{m:10} {a / 2**20:15.1f} {a / base['memory']['breakdown']['activations']:8.2f} "
          f"{s * 1e3:12.1f} {s / base['throughput']['step_time_s']['p50']:8.2f} "
          f"{d['throughput']['tokens_per_second']:9.0f}")
PY
