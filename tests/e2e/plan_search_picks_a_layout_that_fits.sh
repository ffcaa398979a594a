# `trainer plan --search` on 2 cpu ranks with 26 MiB per rank: tiny.yaml as written (micro_batch
# 8, 47 MiB of activations) does not fit and is listed as not fitting. The best layout keeps the
# global batch; it is ZeRO 1 with micro_batch 2 (23.4 MiB usable: ZeRO 0's 12.9 MiB of model
# state leaves room for micro_batch 1 only, and the ranking prefers the larger micro-batch at the
# same traffic). A 2-rank run of it allocates what the search said: activations to the byte,
# model state within 5% (page-granular ZeRO pieces), the sum within the 90% it planned for.
# With 10 MiB nothing fits: exit 1, saying so.
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
read -r state activations total < <(sed -n \
  's/^best per rank: model state \([0-9]*\) B + activations \([0-9]*\) B = \([0-9]*\) B$/\1 \2 \3/p' \
  search.txt)
[ -n "$total" ] || fail "no byte counts for the best layout"

"$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" "${best_sets[@]}" --set train.steps=2 \
  --set train.eval_every=0 --out best >best.log 2>&1 || { cat best.log; fail "the best layout's run failed"; }
/usr/bin/python3 - best/report.json "$state" "$activations" "$memory_gib" <<'PY' \
  || fail "the run does not allocate what the search said"
import json, sys
b = json.load(open(sys.argv[1]))["memory"]["breakdown"]
state, activations, usable = float(sys.argv[2]), int(sys.argv[3]), 0.9 * float(sys.argv[4]) * 2**30
measured_state = b["params"] + b["grads"] + b["optimizer"]
print(f"activations: search {activations} B, run {b['activations']} B; model state: search "
      f"{state:.0f} B, run {measured_state} B; run total {measured_state + b['activations']} B "
      f"of {usable:.0f} B usable")
ok = b["activations"] == activations
ok &= 0.95 * state <= measured_state <= 1.05 * state
ok &= measured_state + b["activations"] <= usable
sys.exit(0 if ok else 1)
PY

set +e
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 --search --memory-gib 0.009765625 >none.txt 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat none.txt; fail "plan --search exited $rc where nothing fits, not 1"; }
grep -q "search: no layout fits; the smallest needs" none.txt || { cat none.txt; fail "no 'no layout fits' line"; }
grep -q "^error: no layout of this config fits" none.txt || { cat none.txt; fail "no error line"; }
