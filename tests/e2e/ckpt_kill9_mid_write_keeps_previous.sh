# kill -9 of a rank while step 20's checkpoint is being written (TRAINER_TEST_CKPT_DELAY_S holds
# the window between the shard writes and the manifest): step_00000020 never appears, the
# reported step 10 loads, and the resumed run's losses equal the uninterrupted run's. Then a
# bit-flipped or truncated shard, a missing manifest and another model shape are refused, and an
# older broken checkpoint is reported and skipped when a newer complete one exists.
source "$2/tests/lib/dist_common.sh"
c=(--set run.deterministic=true --set model.seq_len=32 --set checkpoint.every_steps=10
   --set checkpoint.keep=5)
run_launch ref 2 4 1 30 "${c[@]}" --set checkpoint.dir=ck_ref
# kill_mid_write DIR [train args]: kill -9 one rank while step 20's files are being written.
kill_mid_write() {
  local dir=$1; shift
  TRAINER_TEST_CKPT_DELAY_S=3 "$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" \
    "${small[@]}" "${c[@]}" --set train.steps=30 --set train.micro_batch=4 \
    --set checkpoint.dir=$dir --out run_$dir "$@" >run_$dir.log 2>&1 &
  local launcher=$!
  for _ in $(seq 600); do [ -f $dir/step_00000020.tmp/rank_00001.safetensors ] && break; sleep 0.1; done
  [ -f $dir/step_00000020.tmp/rank_00001.safetensors ] || { cat run_$dir.log; fail "$dir: no step 20 write seen"; }
  grep -q "checkpoint saved: $dir/step_00000010" run_$dir.log || fail "$dir: step 10 was not reported saved"
  local victim rc
  victim=$(pgrep -P $launcher | tail -1)
  kill -9 "$victim"
  set +e; wait $launcher; rc=$?; set -e
  [ $rc -ne 0 ] || fail "$dir: the group exited 0 after a rank was killed"
  [ ! -e $dir/step_00000020 ] || fail "$dir: an incomplete step 20 was renamed into place"
  echo "$dir: killed rank pid $victim mid-write; launcher exit $rc; left: $(ls $dir | tr '\n' ' ')"
}
kill_mid_write ck
# The same with checkpoint.async (the write runs on a background thread while training goes on).
kill_mid_write ck_async --set checkpoint.async=true
run_launch resumed_async 2 4 1 30 "${c[@]}" --set checkpoint.dir=ck_async --resume auto \
  --set train.stop_after_steps=11
grep -q "resumed from ck_async/step_00000010" resumed_async.log \
  || { cat resumed_async.log; fail "async: step 10 not loaded"; }
cp -r ck ck_copy
run_launch resumed 2 4 1 30 "${c[@]}" --set checkpoint.dir=ck --resume auto
grep -q "resumed from ck/step_00000010" resumed.log || { cat resumed.log; fail "step 10 not loaded"; }
grep -q "ignoring incomplete write ck/step_00000020.tmp" resumed.log || fail "tmp dir not reported"
/usr/bin/python3 -c "
import json
for l in open('ref/metrics.jsonl'):
    if json.loads(l)['step'] > 10: print(l, end='')" > ref_tail.jsonl
compare_metrics ref_tail.jsonl resumed/metrics.jsonl --exact --min-steps 20 \
  || fail "resumed losses differ from the uninterrupted run"

refused() {  # refused NAME PATTERN [train args]: the run must fail and print PATTERN ($rc: its exit)
  local name=$1 pattern=$2; shift 2
  rc=0
  "$bin" train "$src/configs/tiny.yaml" "${small[@]}" "${c[@]}" --set train.steps=30 \
    --out $name "$@" >$name.log 2>&1 || rc=$?
  [ "$rc" != 0 ] || { cat $name.log; fail "$name: run was not refused"; }
  grep -q "$pattern" $name.log || { cat $name.log; fail "$name: no '$pattern' in the error"; }
  echo "$name refused (exit $rc): $(grep -m1 error $name.log)"
}
cp -r ck_copy/step_00000010 flip
/usr/bin/python3 -c "
import sys; p='flip/rank_00000.safetensors'; b=bytearray(open(p,'rb').read()); b[-7]^=1
open(p,'wb').write(b)"
refused bitflip "does not match the manifest" --resume flip
[ "$rc" = 1 ] || fail "a damaged checkpoint: exit $rc, not 1"
# Under --resume auto, the refusal says how to go on from the checkpoint before the damaged one.
mkdir -p auto_root && cp -r ck_copy/step_00000010 auto_root/ && cp -r flip auto_root/step_00000020
refused bitflip_auto "move auto_root/step_00000020 out of checkpoint.dir (--resume auto then takes auto_root/step_00000010)" \
  --set checkpoint.dir=auto_root --resume auto
# ... past a damaged one before it too (its file cut short), to the newest that looks whole.
cp -r auto_root auto_root2 && cp -r flip auto_root2/step_00000030
truncate -s -64 auto_root2/step_00000020/rank_00000.safetensors
refused bitflip_auto2 "move auto_root2/step_00000030 and auto_root2/step_00000020 out of checkpoint.dir (--resume auto then takes auto_root2/step_00000010)" \
  --set checkpoint.dir=auto_root2 --resume auto
cp -r ck_copy/step_00000010 trunc
truncate -s -64 trunc/rank_00000.safetensors
refused truncated "truncated" --resume trunc
cp -r ck_copy/step_00000010 nomanifest && rm nomanifest/manifest.json
mkdir -p nm_root && mv nomanifest nm_root/step_00000010
refused no_manifest "no manifest.json" --set checkpoint.dir=nm_root --resume auto
refused other_shape "model shape differs" --resume ck_copy/step_00000010 --set model.n_layer=3
[ "$rc" = 2 ] || fail "a config asking for another model than the checkpoint's: exit $rc, not 2"
mkdir -p ck_copy/step_00000005   # older, no manifest: reported, skipped
run_single skip 8 1 30 "${c[@]}" --set checkpoint.dir=ck_copy --set train.stop_after_steps=11
grep -q "ignoring incomplete write ck_copy/step_00000005" skip.log || { cat skip.log; fail "older bad one not reported"; }
grep -q "resumed from ck_copy/step_00000010" skip.log || fail "newest complete one not loaded"
echo "older broken step_00000005 reported and skipped; step 10 loaded"
