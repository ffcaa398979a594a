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
# On token shards whose ends fall inside a micro-batch stream (3 then 2 global batches of 1024
# tokens, but 7 and 5 of the single run's 512-token micro-batches), both layouts switch shards
# between the same steps, and evaluate the same val tokens: eval_batches 8 is capped to the 4
# global batches the val file holds, with a warning.
/usr/bin/python3 - <<'PY'
import struct
def shard(path, n, salt):
    toks = [(i * 7 + (i // 3) * salt) % 256 for i in range(n)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))
for k, n in enumerate([3585, 2561, 3585]):
    shard("train_%d.bin" % k, n, 11 + k)
shard("val_0.bin", 4097, 5)
PY
files=(--set "data.train=$PWD/train_*.bin" --set "data.val=$PWD/val_0.bin" --set train.eval_every=1)
run_single ref_files 4 2 12 "${files[@]}"
run_launch dp2_files 2 4 1 12 "${files[@]}"
compare_metrics ref_files/metrics.jsonl dp2_files/metrics.jsonl --rtol 1e-5 --min-steps 12 \
  --fields loss,grad_norm,val_loss
grep -qF "data.val holds only 4 global batch(es)" ref_files.log \
  || fail "no warning that eval_batches was capped: $(cat ref_files.log)"
