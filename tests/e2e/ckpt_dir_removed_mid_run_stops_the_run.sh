# checkpoint.dir removed while a 2-rank run goes on (an operator's rm -rf, a cleanup job): the run
# fails on every rank (exit 1) naming the directory, instead of recreating it without the run's
# lock, where a second run could then save over this one's checkpoints. Removed between two saves,
# the next save is refused before it writes; removed while a save writes into it (the write held
# open by TRAINER_TEST_CKPT_DELAY_S), that save's failure names it too.
source "$2/tests/lib/dist_common.sh"
# remove_during NAME WAIT_FOR [train args]: start a run, rm -rf its ck once WAIT_FOR exists (a
# path, or a line of its log).
remove_during() {
  local name=$1 wait_for=$2; shift 2
  "$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" "${small[@]}" --set model.seq_len=32 \
    --set train.steps=100000 --set checkpoint.dir=ck --out run_$name "$@" >$name.log 2>&1 &
  local launcher=$! rc
  seen() { [ -e "$wait_for" ] || grep -qF "$wait_for" $name.log; }
  for _ in $(seq 600); do seen && break; sleep 0.1; done
  seen || { kill -9 $launcher; cat $name.log; fail "$name: no $wait_for in 60 s"; }
  # (rm -rf itself fails where a rank creates a file in a directory it is emptying: again)
  rm -rf ck 2>/dev/null || { sleep 0.2; rm -rf ck; }
  set +e; wait $launcher; rc=$?; set -e
  [ $rc -eq 1 ] || { cat $name.log; fail "$name: exit $rc after checkpoint.dir was removed, want 1"; }
  grep -q 'checkpoint.dir = "ck" was removed or replaced during the run' $name.log \
    || { cat $name.log; fail "$name: the failure does not name the removed checkpoint.dir"; }
  [ ! -e ck ] || fail "$name: checkpoint.dir was created again: $(ls -a ck)"
  [ "$(json_get run_$name/report.json 'd["run"]["status"]')" = failed ] \
    || fail "$name: report: $(cat run_$name/report.json)"
  echo "$name: the removed checkpoint.dir stopped the run: $(grep -m1 'was removed' $name.log | cut -c1-160)"
}
trap 'rm -rf "$work"' EXIT
# (the save of step 50 reported, the next is 50 steps away: the next save's check refuses it)
remove_during between_saves 'checkpoint saved: ck/step_00000050' --set checkpoint.every_steps=50
grep -q 'stopped before saving again' between_saves.log || fail "between_saves: not refused before the save"
# step 10's save: rank 0 made step_00000010.tmp, both ranks wait 2 s before writing into it
TRAINER_TEST_CKPT_DELAY_S=2,before_write remove_during mid_write ck/step_00000010.tmp \
  --set checkpoint.every_steps=10
grep -q 'the save of step 10 failed' mid_write.log || fail "mid_write: not the save of step 10"
# the same with checkpoint.async: training goes on while step 200's write waits 2 s, then fails;
# its commit (at a later step, or before step 400's save) names the directory, and step 200 is
# never reported saved
TRAINER_TEST_CKPT_DELAY_S=2,before_write remove_during async_write ck/step_00000200.tmp \
  --set checkpoint.every_steps=200 --set checkpoint.async=true
grep -q 'the save of step 200 failed' async_write.log || fail "async_write: not the save of step 200"
! grep -q 'checkpoint saved' async_write.log || fail "async_write: $(grep 'checkpoint saved' async_write.log)"
