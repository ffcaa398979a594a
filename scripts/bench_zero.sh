#!/usr/bin/env bash
# ZeRO stages side by side: four runs of one model at dp=NPROC with parallel.zero 0, 1, 2, 3.
# Prints tokens/s, step time, the per-rank model-state bytes measured (report.json
# memory.breakdown: params + grads + optimizer, rank 0) beside the ZeRO formula's prediction
# (`trainer plan`), and the peak RSS per rank. Usage: scripts/bench_zero.sh [NPROC] [STEPS]
# Env: BUILD_DIR (default build/), PRECISION (precision.compute, default fp32; bf16 counts the
# bf16 weight copy). The model is a 6-layer d_model 256 GPT.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
n=${1:-4}
steps=${2:-20}
precision=${PRECISION:-fp32}
cmake --build "$build" --target trainer -j "$(nproc)" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
L=6 C=256 T=128
common=(--set model.n_layer=$L --set model.d_model=$C --set model.seq_len=$T
        --set train.steps=$steps --set train.eval_every=0 --set logging.every_steps=$steps
        --set train.micro_batch=2 --set precision.compute=$precision)
for z in 0 1 2 3; do
  "$build/trainer" launch --nproc-per-node "$n" "$root/configs/tiny.yaml" "${common[@]}" \
    --set parallel.zero=$z --out "$out/z$z" >"$out/z$z.log" 2>&1 || { cat "$out/z$z.log"; exit 1; }
  printf 'model: {n_layer: %d, d_model: %d, seq_len: %d}\nparallel: {dp: %d, zero: %d}\n' \
    $L $C $T "$n" $z >"$out/plan$z.yaml"
  printf 'precision: {compute: %s}\n' "$precision" >>"$out/plan$z.yaml"
  "$build/trainer" plan "$out/plan$z.yaml" --gpus "$n" >"$out/plan$z.txt"
done
/usr/bin/python3 - "$out" "$n" "$precision" <<'PY'
import json, re, sys
out, n, precision = sys.argv[1], sys.argv[2], sys.argv[3]
mib = 2 ** 20
r0 = json.load(open(f"{out}/z0/report.json"))
print(f"dp={n}, {r0['model']['params']} params, {precision}, micro_batch 2, seq_len {r0['batch']['seq_len']}")
print(f"{'zero':>4} {'tokens/s':>9} {'step p50 ms':>11} {'params':>8} {'grads':>8} {'optim':>8} "
      f"{'states MiB':>10} {'formula MiB':>11} {'peak RSS MiB':>12}")
for z in range(4):
    r = json.load(open(f"{out}/z{z}/report.json"))
    t, m = r["throughput"], r["memory"]
    b = m["breakdown"]
    pred = float(re.search(r"total (\d+) B", open(f"{out}/plan{z}.txt").read()).group(1))
    states = b["params"] + b["grads"] + b["optimizer"]
    print(f"{z:>4} {t['tokens_per_second']:9.0f} {1e3 * t['step_time_s']['p50']:11.1f} "
          f"{b['params'] / mib:8.2f} {b['grads'] / mib:8.2f} {b['optimizer'] / mib:8.2f} "
          f"{states / mib:10.2f} {pred / mib:11.2f} {m['peak_bytes_per_rank']['max'] / mib:12.1f}")
PY
