# activation_checkpointing: full and selective recompute on dp=2 (zero 0 and zero 3, where the
# recomputed block's weights must be gathered again in backward) give bit-identical losses and
# grad norms to keeping every activation, and the report shows fewer activation bytes; fp8 too.
source "$2/tests/lib/dist_common.sh"
det=(--set run.deterministic=true)
acts() { json_get "$1/report.json" "d['memory']['breakdown']['activations']"; }
for z in 0 3; do
  run_launch none_$z 2 4 1 12 "${det[@]}" --set parallel.zero=$z
  for mode in selective full; do
    run_launch ${mode}_$z 2 4 1 12 "${det[@]}" --set parallel.zero=$z \
      --set activation_checkpointing=$mode
    echo "zero $z, $mode:"
    compare_metrics none_$z/metrics.jsonl ${mode}_$z/metrics.jsonl --exact --min-steps 12 \
      || fail "zero $z: activation_checkpointing=$mode changed the run"
    [ "$(json_get ${mode}_$z/report.json "d['parallel']['activation_checkpointing']")" = $mode ] \
      || fail "the report does not say activation_checkpointing $mode"
    [ "$(acts ${mode}_$z)" -lt "$(acts none_$z)" ] \
      || fail "$mode keeps $(acts ${mode}_$z) activation bytes, not fewer than $(acts none_$z)"
    echo "  activation bytes: none $(acts none_$z), $mode $(acts ${mode}_$z)"
  done
done
# fp8 (the cpu emulation, through the TRAINER_TEST_EMULATED_FP8 test hook) at zero 3: the scaling
# states move only after backward, so full recompute reruns the forward GEMMs with the forward's
# scales and changes no bit.
fp8=(--set precision.compute=fp8 --set parallel.zero=3)
TRAINER_TEST_EMULATED_FP8=1 run_launch fp8_none 2 4 1 12 "${det[@]}" "${fp8[@]}"
TRAINER_TEST_EMULATED_FP8=1 run_launch fp8_full 2 4 1 12 "${det[@]}" "${fp8[@]}" \
  --set activation_checkpointing=full
echo "fp8, zero 3, full:"
compare_metrics fp8_none/metrics.jsonl fp8_full/metrics.jsonl --exact --min-steps 12 \
  || fail "fp8: activation_checkpointing=full changed the run"
