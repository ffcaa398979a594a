# `trainer plan --search` on 2 cpu ranks with 26 MiB per rank: tiny.yaml as written (micro_batch
# 8, 47 MiB of activations) does not fit and is listed as not fitting. The best layout keeps the
# global batch; it is ZeRO 1 with micro_batch 2 (23.4 MiB usable: ZeRO 0's 12.9 MiB of model
# state leaves room for micro_batch 1 only, and the ranking prefers the larger micro-batch at the
# same traffic). A 2-rank run of it allocates what the search said: activations to the byte,
# model state within 5% (page-granular ZeRO pieces), ZeRO staging to the byte, the sum within the
# 90% it planned for. Plan's "as this runtime holds it" line matches the runs of ZeRO 2 and 3 too,
# and ZeRO 3 at one process (which trains as ZeRO 0). With 16.4 MiB the best is tp 2 with sequence
# parallelism, and its run allocates what the search said. With 6 MiB nothing fits: exit 1.
source "$2/tests/lib/common.sh"
memory_gib=0.025390625 # 26 MiB
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 --search --memory-gib $memory_gib >search.txt 2>&1 \
  || { cat search.txt; fail "plan --search failed"; }
cat search.txt
grep -Eq ' no +[0-9.]+x +[0-9.]+  <- the config$' search.txt \
  || fail "the config's own layout (47 MiB of activations) is not listed as not fitting"
best=$(sed -n 's/^best, as options for trainer train [^:]*: //p' search.txt)
[ -n "$best" ] || fail "no best layout printed"
read -r -a best_sets <<<"$best"
mb=$(sed -n 's/.*train\.micro_batch=\([0-9]*\).*/\1/p' <<<"$best")
ga=$(sed -n 's/.*train\.grad_accum=\([0-9]*\).*/\1/p' <<<"$best")
[ $((mb * ga)) = 8 ] || fail "best layout $best does not keep 8 sequences per rank"
[ "$mb" = 2 ] && grep -q "parallel.zero=1 " <<<"$best" || fail "best layout is $best, not ZeRO 1 with micro_batch 2"
read -r state staging activations total < <(sed -n \
  's/^best per rank: model state \([0-9]*\) B + ZeRO staging \([0-9]*\) B + activations \([0-9]*\) B = \([0-9]*\) B$/\1 \2 \3 \4/p' \
  search.txt)
[ -n "$total" ] || fail "no byte counts for the best layout"

"$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" "${best_sets[@]}" --set train.steps=2 \
  --set train.eval_every=0 --out best >best.log 2>&1 || { cat best.log; fail "the best layout's run failed"; }
/usr/bin/python3 - best/report.json "$state" "$staging" "$activations" "$memory_gib" <<'PY' \
  || fail "the run does not allocate what the search said"
import json, sys
b = json.load(open(sys.argv[1]))["memory"]["breakdown"]
state, staging, activations = float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
usable = 0.9 * float(sys.argv[5]) * 2**30
measured_state = b["params"] + b["grads"] + b["optimizer"]
total = measured_state + b["zero_staging"] + b["activations"]
print(f"activations: search {activations} B, run {b['activations']} B; model state: search "
      f"{state:.0f} B, run {measured_state} B; staging: search {staging} B, run "
      f"{b['zero_staging']} B; run total {total} B of {usable:.0f} B usable")
ok = b["activations"] == activations and b["zero_staging"] == staging
ok &= 0.95 * state <= measured_state <= 1.05 * state
ok &= total <= usable
sys.exit(0 if ok else 1)
PY

# run_best NAME SEARCH_OUTPUT [extra train args]: trains the search's best layout (its --set
# options, after the extra args) for 2 steps on 2 ranks, and checks that rank 0 allocates the
# activations, model state and ZeRO staging the search said. Leaves the options in $best.
run_best() {
  local name=$1 search=$2
  shift 2
  best=$(sed -n 's/^best, as options for trainer train [^:]*: //p' $search)
  local best_sets state staging activations total
  read -r -a best_sets <<<"$best"
  read -r state staging activations total < <(sed -n \
    's/^best per rank: model state \([0-9]*\) B + ZeRO staging \([0-9]*\) B + activations \([0-9]*\) B = \([0-9]*\) B$/\1 \2 \3 \4/p' \
    $search)
  "$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" "$@" "${best_sets[@]}" \
    --set train.steps=2 --set train.eval_every=0 --out $name >$name.log 2>&1 \
    || { cat $name.log; fail "the best layout's run ($name) failed"; }
  /usr/bin/python3 - $name/report.json "$state" "$staging" "$activations" "$name" <<'PY' \
    || fail "the $name run does not allocate what the search said"
import json, sys
b = json.load(open(sys.argv[1]))["memory"]["breakdown"]
state, staging, activations = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
measured_state = b["params"] + b["grads"] + b["optimizer"]
print(f"{sys.argv[5]}: activations search {activations} B, run {b['activations']} B; model state "
      f"search {state} B, run {measured_state} B; staging {staging} B, run {b['zero_staging']} B")
sys.exit(0 if (b["activations"], measured_state, b["zero_staging"]) == (activations, state, staging)
         else 1)
PY
}

# With 16.4 MiB, tp 1 fits only with recompute (more FLOPs; ZeRO 3 at micro_batch 1 needs 16.5
# MiB without), so the best layout is tp 2 with sequence parallelism (dp 1, the same global batch
# of 16 sequences); a run of it allocates the activations, model state and staging the search
# said.
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 --search --memory-gib 0.016 >search_tp.txt 2>&1 \
  || { cat search_tp.txt; fail "plan --search (16.4 MiB) failed"; }
run_best best_tp search_tp.txt
grep -q "parallel.tp=2 --set parallel.sequence_parallel=true --set parallel.pp=1 --set parallel.dp=1 " <<<"$best" \
  || { cat search_tp.txt; fail "the best layout at 16.4 MiB is $best, not tp 2 with sp"; }
mb=$(sed -n 's/.*train\.micro_batch=\([0-9]*\).*/\1/p' <<<"$best")
ga=$(sed -n 's/.*train\.grad_accum=\([0-9]*\).*/\1/p' <<<"$best")
[ $((mb * ga)) = 16 ] || fail "best tp layout $best does not keep the global batch of 16"

# A one-head model (tp cannot split it) at 15.6 MiB: one process's layouts fit only with full
# recompute (a third more FLOPs), so the best is pp 2 with the micro-batch all 16 sequences in
# pieces of one (bubble 1/17); a run of it allocates, on its first stage (the heavier), what the
# search said.
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 --search --memory-gib 0.0152 --set model.n_head=1 \
  >search_pp.txt 2>&1 || { cat search_pp.txt; fail "plan --search (15.6 MiB, one head) failed"; }
run_best best_pp search_pp.txt --set model.n_head=1
grep -q "parallel.pp=2 --set parallel.pipeline.microbatches=16 --set parallel.dp=1 " <<<"$best" \
  || { cat search_pp.txt; fail "the best layout at 15.6 MiB is $best, not pp 2 in 16 pieces"; }

# plan's held-state line against the runs, ZeRO 2 and 3 at dp 2, and ZeRO 3 at one process.
for case in "2 2" "3 2" "3 1"; do
  read -r zero dp <<<"$case"
  sets=(--set parallel.zero=$zero --set train.micro_batch=$((4 / dp)) --set model.n_layer=4)
  "$bin" plan "$src/configs/tiny.yaml" --gpus $dp "${sets[@]}" >held_$zero$dp.txt 2>&1 \
    || { cat held_$zero$dp.txt; fail "plan zero $zero dp $dp"; }
  "$bin" launch --nproc-per-node $dp "$src/configs/tiny.yaml" "${sets[@]}" --set train.steps=2 \
    --set train.eval_every=0 --out held_$zero$dp >held_$zero$dp.log 2>&1 \
    || { cat held_$zero$dp.log; fail "run zero $zero dp $dp"; }
  /usr/bin/python3 - held_$zero$dp.txt held_$zero$dp/report.json "$case" <<'PY' \
    || fail "plan's held state differs from the run's report (zero, dp = $case)"
import json, re, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("model state per rank as this runtime"))
plan = {k: int(v) for k, v in re.findall(r"(params|grads|optimizer|ZeRO staging) (\d+) B", line)}
b = json.load(open(sys.argv[2]))["memory"]["breakdown"]
run = {"params": b["params"], "grads": b["grads"], "optimizer": b["optimizer"],
       "ZeRO staging": b["zero_staging"]}
print(f"zero, dp = {sys.argv[3]}: plan {plan}, run {run}")
# Staging and optimizer state exactly; params and grads are peaks of page-granular residency,
# which the plan bounds from above by whole units: within 10% (and never below the run's 95%).
ok = plan["ZeRO staging"] == run["ZeRO staging"] and plan["optimizer"] == run["optimizer"]
for k in ("params", "grads"):
    ok &= 0.95 * run[k] <= plan[k] <= 1.10 * run[k]
sys.exit(0 if ok else 1)
PY
done

set +e
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 --search --memory-gib 0.005859375 >none.txt 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat none.txt; fail "plan --search exited $rc where nothing fits, not 1"; }
grep -q "search: no layout fits; the smallest needs" none.txt || { cat none.txt; fail "no 'no layout fits' line"; }
grep -q "^error: no layout of this config fits" none.txt || { cat none.txt; fail "no error line"; }
