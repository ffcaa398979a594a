# precision.compute bf16 on the cpu backend (weights and matmul inputs rounded to bf16, fp32
# master weights, accumulation and loss) stays within 2% of the fp32 loss curve of tiny.yaml.
source "$2/tests/lib/common.sh"
args=("$src/configs/tiny.yaml" --set train.steps=40 --set train.warmup_steps=10
      --set train.eval_every=0 --set logging.every_steps=5)
"$bin" train "${args[@]}" --out fp32 >fp32.log 2>&1 || { cat fp32.log; fail "fp32 run failed"; }
"$bin" train "${args[@]}" --set precision.compute=bf16 --out bf16 >bf16.log 2>&1 || { cat bf16.log; fail "bf16 run failed"; }
compare_metrics fp32/metrics.jsonl bf16/metrics.jsonl --fields loss --rtol 0.02 --min-steps 8
# ... and bf16 really rounds: the curves are not identical.
if compare_metrics fp32/metrics.jsonl bf16/metrics.jsonl --fields loss --exact >/dev/null; then
  fail "bf16 run is bit-identical to fp32: nothing was rounded"
fi
[ "$(json_get bf16/report.json 'd["parallel"]["precision"]')" = bf16 ] || fail "report does not say bf16"
