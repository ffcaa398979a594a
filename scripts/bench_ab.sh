#!/usr/bin/env bash
# A/B of two trainer binaries (two commits, two builds) on one run config: the runs alternate
# (A, B, A, B, ...) so that load drifts hit both alike; prints each run's step-time p50 (the
# report's, warm-up excluded), the medians, and the B/A speed ratio (> 1: B is faster).
#   scripts/bench_ab.sh TRAINER_A TRAINER_B [ROUNDS] [-- trainer train args ...]
# Default args: configs/tiny.yaml at a 4-layer, d_model 256, seq 256, micro_batch 8 shape for
# 30 steps, no eval, no checkpoints. Env: THREADS (default nproc / NPROC), NPROC (default 1:
# `trainer train`; above 1, `trainer launch --nproc-per-node NPROC`, and each side's rank 0
# memory figures are printed too: its ZeRO staging and peak per rank).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[[ $# -ge 2 ]] || { sed -n '2,7p' "$0" >&2; exit 2; }
a=$1 b=$2
shift 2
rounds=3
if [[ $# -gt 0 && $1 != -- ]]; then rounds=$1; shift; fi
[[ ${1:-} == -- ]] && shift
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=("$root/configs/tiny.yaml" --set model.n_layer=4
  --set model.d_model=256 --set model.n_head=4 --set model.seq_len=256 --set train.micro_batch=8
  --set train.steps=30 --set train.warmup_steps=1 --set train.eval_every=0
  --set logging.every_steps=10 --set checkpoint.every_steps=0)
nproc_ranks=${NPROC:-1}
threads=${THREADS:-$(($(nproc) / nproc_ranks > 0 ? $(nproc) / nproc_ranks : 1))}
verb=(train)
[[ $nproc_ranks -gt 1 ]] && verb=(launch --nproc-per-node "$nproc_ranks")
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for side in a b; do
    bin=$a
    [[ $side == b ]] && bin=$b
    "$bin" "${verb[@]}" "${args[@]}" --out "$out/$side$r" >"$out/$side$r.log" 2>&1 ||
      { cat "$out/$side$r.log" >&2; exit 1; }
  done
done
/usr/bin/python3 - "$out" "$rounds" "$a" "$b" <<'PY'
import json, statistics, sys
out, rounds, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
p50 = {s: [json.load(open(f"{out}/{s}{r}/report.json"))["throughput"]["step_time_s"]["p50"]
           for r in range(rounds)] for s in "ab"}
loss = {s: json.load(open(f"{out}/{s}0/report.json"))["loss"]["final_train_loss"] for s in "ab"}
for s, name in (("a", a), ("b", b)):
    r0 = json.load(open(f"{out}/{s}0/report.json"))
    print(f"{s.upper()} {name}: step p50 ms " + " ".join(f"{1e3 * t:.1f}" for t in p50[s]) +
          f" | median {1e3 * statistics.median(p50[s]):.1f} | final loss {loss[s]:.6f}"
          f" | zero_staging {r0['memory']['breakdown']['zero_staging']} B"
          f" | peak/rank {r0['memory']['peak_bytes_per_rank']['max']} B")
print(f"speed B/A: {statistics.median(p50['a']) / statistics.median(p50['b']):.3f}")
PY
