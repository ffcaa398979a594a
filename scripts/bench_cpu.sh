#!/usr/bin/env bash
# The trainer's cpu step against PyTorch's on one GPT-2-small-shaped model (n_layer 12, d_model 768,
# n_head 12, seq 256, vocab 50257, micro_batch 4, fp32, AdamW), same steps, same warm-up excluded,
# same flop formula and the same peak (the trainer's measured sgemm peak). Prints step time p50,
# tokens/s, MFU and the trainer/torch tokens/s ratio.
# Usage: scripts/bench_cpu.sh [STEPS] (default 6). Env: BUILD_DIR (default build/), THREADS
# (default nproc), NO_BUILD=1 to skip rebuilding the trainer, L C NH T B V to change the shape
# (smoke tests). Needs Debian's python3-torch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
steps=${1:-6}
threads=${THREADS:-$(nproc)}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
[[ ${NO_BUILD:-0} == 1 ]] || cmake --build "$build" --target trainer -j "$(nproc)" >/dev/null
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "needs python3-torch (apt)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
L=${L:-12} C=${C:-768} NH=${NH:-12} T=${T:-256} B=${B:-4} V=${V:-50257}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); threads $threads; $steps steps" >&2
"$build/trainer" train "$root/configs/tiny.yaml" --set model.n_layer=$L --set model.d_model=$C \
  --set model.n_head=$NH --set model.seq_len=$T --set model.vocab_size=$V \
  --set train.micro_batch=$B --set train.steps="$steps" --set train.eval_every=0 \
  --set logging.every_steps=1 --set train.warmup_steps=1 \
  --set data.train=synthetic:uniform --set data.val=synthetic:uniform \
  --out "$out/trainer" >"$out/trainer.log" 2>&1 || { cat "$out/trainer.log"; exit 1; }
read -r peak warmup < <(/usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(r["hardware"]["peak_tflops_per_device"], r["throughput"]["warmup_steps_excluded"])' \
  "$out/trainer/report.json")
/usr/bin/python3 "$root/scripts/bench_cpu_torch.py" --layers $L --d_model $C --heads $NH --seq $T \
  --batch $B --vocab $V --steps "$steps" --warmup "$warmup" --peak-tflops "$peak" \
  --threads "$threads" >"$out/torch.json"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
r = json.load(open(f"{out}/trainer/report.json"))
steps = [json.loads(l)["step_time_s"] for l in open(f"{out}/trainer/metrics.jsonl") if l.strip()]
t = json.load(open(f"{out}/torch.json"))
th = r["throughput"]
fpt = r["model"]["flops_per_token"]
print(f"model: {r['model']['params']} params, {fpt:.3e} flops/token (torch "
      f"{t['flops_per_token']:.3e}), B={r['batch']['micro_batch']} T={r['batch']['seq_len']}, "
      f"peak {r['hardware']['peak_tflops_per_device']:.4f} TFLOP/s ({r['hardware']['peak_source']}), "
      f"{th['warmup_steps_excluded']} warm-up steps excluded, {t['threads']} threads")
print("trainer step times s: " + " ".join(f"{s:.2f}" for s in steps))
print("torch   step times s: " + " ".join(f"{s:.2f}" for s in t["step_times_s"]))
print(f"{'impl':<16} {'step p50 ms':>11} {'tokens/s':>9} {'MFU':>7}")
print(f"{'trainer':<16} {1e3 * th['step_time_s']['p50']:11.1f} {th['tokens_per_second']:9.2f} "
      f"{100 * th['mfu']:6.1f}%")
print(f"{t['impl']:<16} {1e3 * t['step_time_p50_s']:11.1f} {t['tokens_per_second']:9.2f} "
      f"{100 * t['mfu']:6.1f}%")
print(f"ratio trainer/torch tokens/s: {th['tokens_per_second'] / t['tokens_per_second']:.3f}")
PY
