# Measured per-rank params+grads+optimizer bytes (report.json memory.breakdown, rank 0) fall as
# the ZeRO formula printed by `trainer plan` says when dp goes 1 -> 2 -> 4, for stages 1, 2, 3,
# in fp32 and in bf16 compute (18 bytes/param: fp32 master weights + bf16 copy, fp32 grads, m, v):
#  - measured >= 95% of the prediction and <= prediction + C + 5%, where the stated constant C is
#    what this model keeps live beyond the formula: stage 1 none; stage 2 the full-size gradients
#    of the units not yet reduce-scattered (wte, written by the tied head at the start of
#    backward, plus the block in flight); stage 3 that, plus the gathered units' params (wte,
#    final norm, the block in use and the prefetched one; 6 bytes each in bf16, with the copy's
#    partial pages). C is computed from the layout here.
#  - the totals fall strictly with dp, and the measured drop from dp 1 to dp 4 is within 5% + C of
#    the predicted drop.
source "$2/tests/lib/dist_common.sh"
L=8 C=64 T=32
cfg=(--set model.n_layer=$L --set model.d_model=$C --set model.seq_len=$T --set train.steps=2
     --set logging.every_steps=1 --set train.eval_every=0)
for prec in fp32 bf16; do
  for stage in 1 2 3; do
    for dp in 1 2 4; do
      out=${prec}_m${stage}_${dp}
      "$bin" launch --nproc-per-node $dp "$src/configs/tiny.yaml" "${cfg[@]}" \
        --set train.micro_batch=$((4 / dp)) --set parallel.zero=$stage \
        --set precision.compute=$prec --out $out >$out.log 2>&1 \
        || { cat $out.log; fail "run $out failed"; }
      printf 'model: {n_layer: %d, d_model: %d, seq_len: %d}\nparallel: {dp: %d, zero: %d}\n' \
        $L $C $T $dp $stage >plan_$out.yaml
      printf 'precision: {compute: %s}\n' $prec >>plan_$out.yaml
      "$bin" plan plan_$out.yaml --gpus $dp >$out.plan || { cat $out.plan; fail "plan $out"; }
    done
  done
done
/usr/bin/python3 - "$L" "$C" "$T" <<'PY' || fail "measured memory does not follow the ZeRO formula"
import json, re, sys
L, C, T = map(int, sys.argv[1:])
V, page = 256, 4096
unit0, block, final = (V + T) * C, 12 * C * C + 13 * C, 2 * C
ok = True
for prec, pbytes, ppages in (("fp32", 4, 8), ("bf16", 6, 16)):
    live_grads = 4 * (unit0 + block) + 4 * page
    live_params = pbytes * (unit0 + final + 2 * block) + ppages * page
    const = {1: 0, 2: live_grads, 3: live_grads + live_params}
    for stage in (1, 2, 3):
        meas, pred = {}, {}
        for dp in (1, 2, 4):
            b = json.load(open(f"{prec}_m{stage}_{dp}/report.json"))["memory"]["breakdown"]
            meas[dp] = b["params"] + b["grads"] + b["optimizer"]
            plan = open(f"{prec}_m{stage}_{dp}.plan").read()
            pred[dp] = float(re.search(r"total (\d+) B", plan).group(1))
            lo, hi = 0.95 * pred[dp], 1.05 * (pred[dp] + const[stage])
            good = lo <= meas[dp] <= hi
            ok &= good
            print(f"{prec} zero {stage} dp {dp}: measured {meas[dp]} B, formula {pred[dp]:.0f} B, "
                  f"allowed [{lo:.0f}, {hi:.0f}] (C = {const[stage]}){'' if good else '  <-- FAIL'}")
        falls = meas[1] > meas[2] > meas[4]
        drop_m, drop_p = meas[1] - meas[4], pred[1] - pred[4]
        drop_ok = abs(drop_m - drop_p) <= 0.05 * drop_p + const[stage]
        print(f"{prec} zero {stage}: falls with dp {falls}; drop 1->4 measured {drop_m} B vs formula "
              f"{drop_p:.0f} B (ratio {drop_m / drop_p:.3f}){'' if drop_ok else '  <-- FAIL'}")
        ok &= falls and drop_ok
sys.exit(0 if ok else 1)
PY
