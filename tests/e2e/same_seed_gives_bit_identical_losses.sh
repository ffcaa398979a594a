# Determinism: two runs of tiny.yaml with the same seed log bit-identical losses.
source "$2/tests/lib/common.sh"
for out in a b; do
  "$bin" train "$src/configs/tiny.yaml" --set train.steps=20 --set logging.every_steps=1 \
    --set train.eval_every=0 --out $out >$out.log 2>&1 || { cat $out.log; fail "run $out failed"; }
done
compare_metrics a/metrics.jsonl b/metrics.jsonl --exact --min-steps 20
# The same run logged every 5 steps: each line's loss is that step's, and its loss_mean the mean
# of the losses of the steps since the previous line (as Megatron logs its loss).
"$bin" train "$src/configs/tiny.yaml" --set train.steps=20 --set logging.every_steps=5 \
  --set train.eval_every=0 --out c >c.log 2>&1 || { cat c.log; fail "run c failed"; }
/usr/bin/python3 - <<'PY' || fail "loss_mean is not the mean of the losses since the previous line"
import json
every = {r["step"]: r for r in map(json.loads, open("a/metrics.jsonl"))}
lines = [json.loads(l) for l in open("c/metrics.jsonl")]
assert [r["step"] for r in lines] == [1, 5, 10, 15, 20], [r["step"] for r in lines]
prev = 0
for r in lines:
    want = sum(every[s]["loss"] for s in range(prev + 1, r["step"] + 1)) / (r["step"] - prev)
    assert r["loss"] == every[r["step"]]["loss"], r
    assert abs(r["loss_mean"] - want) <= 1e-12 * abs(want), (r, want)
    prev = r["step"]
print("loss_mean of steps 2-5:", lines[1]["loss_mean"], "; step 5's loss:", lines[1]["loss"])
PY
# ... also across a kill right after step 7's checkpoint and a resume: step 10's loss_mean still
# covers steps 6-10 (the checkpoint carries the losses since the last line).
TRAINER_TEST_FAULT="rank=0,step=7,kind=kill_after_save" "$bin" train "$src/configs/tiny.yaml" \
  --set train.steps=20 --set logging.every_steps=5 --set train.eval_every=0 \
  --set checkpoint.every_steps=7 --out d >d.log 2>&1 && fail "the kill did not happen"
"$bin" train "$src/configs/tiny.yaml" --set train.steps=20 --set logging.every_steps=5 \
  --set train.eval_every=0 --set checkpoint.every_steps=7 --out d >d2.log 2>&1 \
  || { cat d2.log; fail "the resumed run failed"; }
grep -q "resumed from" d2.log || { cat d2.log; fail "did not resume"; }
/usr/bin/python3 - <<'PY' || fail "loss_mean after the resume differs from the uninterrupted run's"
import json
c = [json.loads(l) for l in open("c/metrics.jsonl")]
d = [json.loads(l) for l in open("d/metrics.jsonl")]
assert [r["step"] for r in d] == [r["step"] for r in c], [r["step"] for r in d]
for a, b in zip(c, d):
    assert a["loss"] == b["loss"] and a["loss_mean"] == b["loss_mean"], (a, b)
print("loss_mean across the resume equals the uninterrupted run's at every line")
PY
