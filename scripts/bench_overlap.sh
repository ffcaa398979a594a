#!/usr/bin/env bash
# How much of the gradient all-reduce backward hides: two 4-rank runs of the same model, with
# parallel.overlap_grad_reduce on and off. report.json's throughput.grad_sync_wait_s is the time
# each step blocks on the reduction after backward; with overlap off that is the whole
# all-reduce, so hidden = 1 - wait(on) / wait(off). Usage: scripts/bench_overlap.sh [NPROC] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
n=${1:-4}
steps=${2:-30}
cmake --build "$build" --target trainer -j "$(nproc)" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--set train.steps=$steps --set train.eval_every=0 --set logging.every_steps=$steps
        --set train.micro_batch=2 --set parallel.bucket_mb=1)
for mode in true false; do
  "$build/trainer" launch --nproc-per-node "$n" "$root/configs/tiny.yaml" "${common[@]}" \
    --set parallel.overlap_grad_reduce=$mode --out "$out/$mode" >"$out/$mode.log" 2>&1
done
/usr/bin/python3 - "$out" "$n" <<'PY'
import json, sys
out, n = sys.argv[1], sys.argv[2]
r = {m: json.load(open(f"{out}/{m}/report.json")) for m in ("true", "false")}
on, off = (r[m]["throughput"] for m in ("true", "false"))
print(f"dp={n}, {r['true']['model']['params']} params ({4*r['true']['model']['params']/2**20:.1f} MiB of fp32 gradients), "
      f"bucket_mb 1")
print(f"{'overlap':>8} {'step p50 ms':>12} {'tokens/s':>10} {'wait after backward ms':>24}")
for m, t in (("on", on), ("off", off)):
    print(f"{m:>8} {1e3*t['step_time_s']['p50']:12.1f} {t['tokens_per_second']:10.0f} {1e3*t['grad_sync_wait_s']:24.2f}")
hidden = 1 - on["grad_sync_wait_s"] / off["grad_sync_wait_s"]
print(f"all-reduce time hidden by overlap: {100*hidden:.0f}% (speed-up {off['step_time_s']['p50']/on['step_time_s']['p50']:.2f}x)")
PY
