#!/usr/bin/env bash
# Pipeline parallelism against one process, in one invocation: the same model and global batch run
# as one process, as pp=NPROC with 1F1B and with GPipe (8 pieces of one sequence each), and as
# dp=NPROC (the cpu's cores split evenly over the ranks: OMP/OpenBLAS threads = nproc / ranks).
# NPROC must divide 8 (the layers and the sequences per step). Prints tokens/s and the ratio to
# one process, the step time p50, the schedule's bubble ((pp - 1) / (pieces + pp - 1)), and rank
# 0's params and activation bytes (report.json memory.breakdown: the first stage's).
#   scripts/bench_pp.sh [NPROC] [STEPS]      Env: BUILD_DIR (default build/), PRECISION (fp32)
# The model is an 8-layer d_model 256 GPT (8 heads), seq_len 256, 8 sequences per step.
set -euo pipefail
source "$(dirname "$0")/bench_ranks.sh" "$@"  # root, build, n, steps, precision, out; run
common=(--set model.n_layer=8 --set model.d_model=256 --set model.n_head=8
        --set model.seq_len=256 --set train.steps=$steps --set train.warmup_steps=1
        --set train.eval_every=0 --set logging.every_steps=$steps --set checkpoint.every_steps=0
        --set precision.compute=$precision)
pipe=(--set train.micro_batch=8 --set parallel.pp="$n" --set parallel.pipeline.microbatches=8)
run one 1 --set train.micro_batch=8
run pp "$n" "${pipe[@]}"
run gpipe "$n" "${pipe[@]}" --set parallel.pipeline.schedule=gpipe
run dp "$n" --set train.micro_batch=$((8 / n))
/usr/bin/python3 - "$out" "$n" "$precision" <<'PY'
import json, sys
out, n, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mib = 2 ** 20
rows = [("one process", "one", None), (f"pp {n} 1f1b", "pp", 8), (f"pp {n} gpipe", "gpipe", 8),
        (f"dp {n}", "dp", None)]
ref = json.load(open(f"{out}/one/report.json"))["throughput"]["tokens_per_second"]
print(f"{precision}, {json.load(open(out + '/one/report.json'))['model']['params']} params, "
      f"8 sequences x 256 tokens per step; cores split over the ranks")
print(f"{'layout':>13} {'tokens/s':>9} {'vs one':>7} {'step p50 ms':>11} {'bubble':>7} "
      f"{'params MiB':>10} {'activ. MiB':>10}")
for label, name, pieces in rows:
    r = json.load(open(f"{out}/{name}/report.json"))
    t, b = r["throughput"], r["memory"]["breakdown"]
    bubble = f"{100 * (n - 1) / (pieces + n - 1):6.1f}%" if pieces else "      -"
    print(f"{label:>13} {t['tokens_per_second']:9.0f} {t['tokens_per_second'] / ref:7.2f} "
          f"{1e3 * t['step_time_s']['p50']:11.1f} {bubble} {b['params'] / mib:10.2f} "
          f"{b['activations'] / mib:10.2f}")
PY
