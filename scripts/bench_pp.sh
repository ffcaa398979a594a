#!/usr/bin/env bash
# Pipeline parallelism against one process, in one invocation: the same model and global batch run
# as one process, as pp=NPROC with 1F1B, GPipe and the interleaved schedule with 2 chunks a stage
# (8 pieces of one sequence each), as pp=NPROC with 1F1B and interleaved at NPROC pieces (where
# the bubble is largest), and as dp=NPROC (the cpu's cores split evenly over the ranks:
# OMP/OpenBLAS threads = nproc / ranks). NPROC must divide 4 (the 8 layers make 2 chunks a stage).
# Prints tokens/s and the ratio to one process, the step time p50, the schedule's bubble
# ((pp - 1) / (v * pieces + pp - 1), v the chunks a stage), the share of the first stage's step
# it spent waiting in its exchanges with the other stages (the pp.* phases of 3 profiled steps:
# the bubble as measured, plus the transfers), and rank 0's params and activation bytes
# (report.json memory.breakdown: the first stage's).
#   scripts/bench_pp.sh [NPROC] [STEPS]      Env: BUILD_DIR (default build/), PRECISION (fp32)
# The model is an 8-layer d_model 256 GPT (8 heads), seq_len 256, 8 sequences per step.
set -euo pipefail
source "$(dirname "$0")/bench_ranks.sh" "$@"  # root, build, n, steps, precision, out; run
common=(--set model.n_layer=8 --set model.d_model=256 --set model.n_head=8
        --set model.seq_len=256 --set train.steps=$steps --set train.warmup_steps=1
        --set train.eval_every=0 --set logging.every_steps=$steps --set checkpoint.every_steps=0
        --set precision.compute=$precision)
(( 4 % n == 0 )) || { echo "NPROC $n must divide 4 (2 chunks a stage of the 8 layers)" >&2; exit 2; }
prof=(--set logging.profile_steps=3)
pipe=(--set train.micro_batch=8 --set parallel.pp="$n" --set parallel.pipeline.microbatches=8
      "${prof[@]}")
few=(--set train.micro_batch=8 --set parallel.pp="$n" --set parallel.pipeline.microbatches="$n"
     "${prof[@]}")
il=(--set parallel.pipeline.schedule=interleaved --set parallel.pipeline.virtual_stages=2)
run one 1 --set train.micro_batch=8
run pp "$n" "${pipe[@]}"
run gpipe "$n" "${pipe[@]}" --set parallel.pipeline.schedule=gpipe
run il "$n" "${pipe[@]}" "${il[@]}"
run pp_few "$n" "${few[@]}"
run il_few "$n" "${few[@]}" "${il[@]}"
run dp "$n" --set train.micro_batch=$((8 / n))
/usr/bin/python3 - "$out" "$n" "$precision" <<'PY'
import json, sys
out, n, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mib = 2 ** 20
# (label, run, pieces, chunks a stage)
rows = [("one process", "one", None, 1), (f"pp {n} 1f1b", "pp", 8, 1),
        (f"pp {n} gpipe", "gpipe", 8, 1), (f"pp {n} interl. x2", "il", 8, 2),
        (f"pp {n} 1f1b", "pp_few", n, 1), (f"pp {n} interl. x2", "il_few", n, 2),
        (f"dp {n}", "dp", None, 1)]
ref = json.load(open(f"{out}/one/report.json"))["throughput"]["tokens_per_second"]
print(f"{precision}, {json.load(open(out + '/one/report.json'))['model']['params']} params, "
      f"8 sequences x 256 tokens per step; cores split over the ranks")
print(f"{'layout':>18} {'pieces':>6} {'tokens/s':>9} {'vs one':>7} {'step p50 ms':>11} "
      f"{'bubble':>7} {'pp wait':>7} {'params MiB':>10} {'activ. MiB':>10}")
for label, name, pieces, v in rows:
    r = json.load(open(f"{out}/{name}/report.json"))
    t, b = r["throughput"], r["memory"]["breakdown"]
    bubble = f"{100 * (n - 1) / (v * pieces + n - 1):6.1f}%" if pieces else "      -"
    wait = "      -"
    if pieces:
        share = sum(p["share"] for p in r["profile"]["phases"] if p["name"].startswith("pp."))
        wait = f"{100 * share:6.1f}%"
    print(f"{label:>18} {pieces or '-':>6} {t['tokens_per_second']:9.0f} "
          f"{t['tokens_per_second'] / ref:7.2f} {1e3 * t['step_time_s']['p50']:11.1f} {bubble} "
          f"{wait} {b['params'] / mib:10.2f} {b['activations'] / mib:10.2f}")
PY
