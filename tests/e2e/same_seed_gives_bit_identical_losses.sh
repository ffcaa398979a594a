# Determinism: two runs of tiny.yaml with the same seed log bit-identical losses.
source "$2/tests/lib/common.sh"
for out in a b; do
  "$bin" train "$src/configs/tiny.yaml" --set train.steps=20 --set logging.every_steps=1 \
    --set train.eval_every=0 --out $out >$out.log 2>&1 || { cat $out.log; fail "run $out failed"; }
done
compare_metrics a/metrics.jsonl b/metrics.jsonl --exact --min-steps 20
