# Data parallel reproduces the single-process run with the same global batch (micro_batch x
# grad_accum x dp = 8 sequences): losses and grad norms within 1e-5 relative over 30 steps, for
# dp 2 and 4, with and without overlapped bucket all-reduce, with grad_accum.
source "$2/tests/lib/dist_common.sh"
run_single ref 4 2 30
run_launch dp2 2 4 1 30
compare_metrics ref/metrics.jsonl dp2/metrics.jsonl --rtol 1e-5 --min-steps 30
run_launch dp2_no_overlap 2 4 1 30 --set parallel.overlap_grad_reduce=false
compare_metrics ref/metrics.jsonl dp2_no_overlap/metrics.jsonl --rtol 1e-5 --min-steps 30
run_launch dp4_accum 4 1 2 30
compare_metrics ref/metrics.jsonl dp4_accum/metrics.jsonl --rtol 1e-5 --min-steps 30
run_launch dp4_no_overlap 4 2 1 30 --set parallel.overlap_grad_reduce=false
compare_metrics ref/metrics.jsonl dp4_no_overlap/metrics.jsonl --rtol 1e-5 --min-steps 30
# The report states the layout and the global batch.
[ "$(json_get dp4_accum/report.json 'd["parallel"]["dp"], d["batch"]["global_batch_sequences"], d["hardware"]["device_count"]')" = "4 8 4" ] \
  || fail "dp4 report: $(json_get dp4_accum/report.json 'd["parallel"], d["batch"]')"
json_get dp4_accum/report.json 'd["stragglers"]'
