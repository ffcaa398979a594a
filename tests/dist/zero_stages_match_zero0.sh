# ZeRO 1, 2 and 3 at dp=2 and dp=4, grad_accum 1 and 2, reproduce the zero=0 run of the same
# layout: losses and grad norms within 1e-5 relative over 30 steps. Global batch is 8 sequences
# everywhere (micro_batch x grad_accum x dp).
source "$2/tests/lib/dist_common.sh"
seq=(--set model.seq_len=32)
for dp in 2 4; do
  for ga in 1 2; do
    mb=$((8 / dp / ga))
    run_launch ref_${dp}_${ga} $dp $mb $ga 30 "${seq[@]}" --set parallel.zero=0
    for stage in 1 2 3; do
      out=z${stage}_${dp}_${ga}
      run_launch $out $dp $mb $ga 30 "${seq[@]}" --set parallel.zero=$stage
      echo "zero $stage dp $dp grad_accum $ga:"
      compare_metrics ref_${dp}_${ga}/metrics.jsonl $out/metrics.jsonl --rtol 1e-5 --min-steps 30 \
        || fail "zero $stage dp $dp grad_accum $ga differs from zero 0"
    done
  done
done
