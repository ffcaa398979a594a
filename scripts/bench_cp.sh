#!/usr/bin/env bash
# Context parallelism against one process, in one invocation: the same model and global batch
# (4 sequences of 1024 tokens, where attention's T x T work is the larger part of a step on the
# cpu backend) run as one process, as cp=NPROC (each rank its 2 chunks of every sequence, qkv
# gathered over cp) and as dp=NPROC (the cores split evenly over the ranks: OMP/OpenBLAS
# threads = nproc / ranks). Prints tokens/s and the ratio to one process, the step time p50, the
# share of rank 0's step spent in the cp collectives (the fwd/bwd/recompute cp_* phases of 3
# profiled steps), and rank 0's activation bytes (report.json memory.breakdown).
#   scripts/bench_cp.sh [NPROC] [STEPS]      Env: BUILD_DIR (default build/), PRECISION (fp32)
# The model is a 4-layer d_model 128 GPT (4 heads), seq_len 1024.
set -euo pipefail
source "$(dirname "$0")/bench_ranks.sh" "$@"  # root, build, n, steps, precision, out; run
(( 4 % n == 0 )) || { echo "NPROC $n must divide 4 (the micro-batch of 4 sequences)" >&2; exit 2; }
common=(--set model.n_layer=4 --set model.d_model=128 --set model.n_head=4
        --set model.seq_len=1024 --set train.steps=$steps --set train.warmup_steps=1
        --set train.eval_every=0 --set logging.every_steps=$steps --set checkpoint.every_steps=0
        --set precision.compute=$precision --set logging.profile_steps=3)
run one 1 --set train.micro_batch=4
run cp "$n" --set train.micro_batch=4 --set parallel.cp="$n"
run dp "$n" --set train.micro_batch=$((4 / n))
/usr/bin/python3 - "$out" "$n" "$precision" <<'PY'
import json, sys
out, n, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mib = 2 ** 20
ref = json.load(open(f"{out}/one/report.json"))["throughput"]["tokens_per_second"]
print(f"{precision}, {json.load(open(out + '/one/report.json'))['model']['params']} params, "
      f"4 sequences x 1024 tokens per step; cores split over the ranks")
print(f"{'layout':>12} {'tokens/s':>9} {'vs one':>7} {'step p50 ms':>11} {'cp comm':>7} "
      f"{'attention':>9} {'activ. MiB':>10}")
for label, name in [("one process", "one"), (f"cp {n}", "cp"), (f"dp {n}", "dp")]:
    r = json.load(open(f"{out}/{name}/report.json"))
    t, b, phases = r["throughput"], r["memory"]["breakdown"], r["profile"]["phases"]
    comm = sum(p["share"] for p in phases if ".cp_" in p["name"])
    attention = sum(p["share"] for p in phases if p["name"].endswith(".attention"))
    print(f"{label:>12} {t['tokens_per_second']:9.0f} {t['tokens_per_second'] / ref:7.2f} "
          f"{1e3 * t['step_time_s']['p50']:11.1f} {100 * comm:6.1f}% {100 * attention:8.1f}% "
          f"{b['activations'] / mib:10.2f}")
PY
