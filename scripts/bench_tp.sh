#!/usr/bin/env bash
# Tensor parallelism against one process, in one invocation: the same model and global batch run
# as one process, as tp=NPROC (without and with sequence parallelism) and as dp=NPROC (the cpu's
# cores split evenly over the ranks: OMP/OpenBLAS threads = nproc / ranks). NPROC must divide 8
# (the sequences per step and the heads). Prints tokens/s and the ratio to one process, the step
# time p50, rank 0's params and activation bytes (report.json memory.breakdown), and the share of
# a profiled step rank 0 spends in the tp collectives (fwd/bwd/recompute.tp_* phases).
#   scripts/bench_tp.sh [NPROC] [STEPS]      Env: BUILD_DIR (default build/), PRECISION (fp32),
#                                             VOCAB (256)
# The model is a 4-layer d_model 256 GPT (8 heads), seq_len 256, 8 sequences per step, over a
# vocabulary of VOCAB tokens (a large one, e.g. 32768, makes the head most of the work: the
# vocabulary-parallel head splits it over the tp ranks).
vocab=${VOCAB:-256}
set -euo pipefail
source "$(dirname "$0")/bench_ranks.sh" "$@"  # root, build, n, steps, precision, out; run
common=(--set model.n_layer=4 --set model.d_model=256 --set model.n_head=8
        --set model.seq_len=256 --set model.vocab_size=$vocab
        --set train.steps=$steps --set train.warmup_steps=1
        --set train.eval_every=0 --set logging.every_steps=$steps --set checkpoint.every_steps=0
        --set logging.profile_steps=3 --set precision.compute=$precision)
run one 1 --set train.micro_batch=8
run tp "$n" --set train.micro_batch=8 --set parallel.tp="$n"
run sp "$n" --set train.micro_batch=8 --set parallel.tp="$n" --set parallel.sequence_parallel=true
run dp "$n" --set train.micro_batch=$((8 / n))
/usr/bin/python3 - "$out" "$n" "$precision" <<'PY'
import json, sys
out, n, precision = sys.argv[1], sys.argv[2], sys.argv[3]
mib = 2 ** 20
rows = [("one process", "one"), (f"tp {n}", "tp"), (f"tp {n} + sp", "sp"), (f"dp {n}", "dp")]
ref = json.load(open(f"{out}/one/report.json"))["throughput"]["tokens_per_second"]
one = json.load(open(out + '/one/report.json'))
print(f"{precision}, {one['model']['params']} params (vocabulary {one['model']['vocab_size']}), "
      f"8 sequences x 256 tokens per step; cores split over the ranks")
print(f"{'layout':>12} {'tokens/s':>9} {'vs one':>7} {'step p50 ms':>11} {'params MiB':>10} "
      f"{'activ. MiB':>10} {'tp comm share':>13}")
for label, name in rows:
    r = json.load(open(f"{out}/{name}/report.json"))
    t, b = r["throughput"], r["memory"]["breakdown"]
    phases = (r.get("profile") or {}).get("phases") or []
    share = sum(p["share"] for p in phases
                if p["name"].split(".")[-1] in ("tp_all_reduce", "tp_all_gather", "tp_reduce_scatter"))
    print(f"{label:>12} {t['tokens_per_second']:9.0f} {t['tokens_per_second'] / ref:7.2f} "
          f"{1e3 * t['step_time_s']['p50']:11.1f} {b['params'] / mib:10.2f} "
          f"{b['activations'] / mib:10.2f} {100 * share:12.1f}%")
PY
