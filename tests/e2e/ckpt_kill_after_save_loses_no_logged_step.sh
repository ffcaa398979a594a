# A SIGKILL right after a checkpoint is saved (a scheduler's kill at the worst moment) loses
# nothing that was logged: the step's metrics line and eval went out before its save, so the
# requeued run's metrics.jsonl equals the uninterrupted run's line for line. At the final step the
# kill also comes before report.json: the requeue, with nothing left to train, sees the report
# behind the checkpoint (it says "running" at an earlier step) and writes it again.
source "$2/tests/lib/dist_common.sh"
c=(--set run.deterministic=true --set checkpoint.every_steps=6 --set train.eval_every=6
   --set train.eval_batches=2)
run_single full 4 1 12 "${c[@]}" --set checkpoint.dir=ck_full

killed_after_save() {  # killed_after_save STEP OUT [args]: the run SIGKILLed after STEP's save
  local step=$1 out=$2
  shift 2
  set +e
  TRAINER_TEST_FAULT="rank=0,step=$step,kind=kill_after_save" "$bin" train \
    "$src/configs/tiny.yaml" "${small[@]}" --set train.steps=12 --set train.micro_batch=4 \
    "${c[@]}" --out "$out" "$@" >"$out.killed.log" 2>&1
  local rc=$?
  set -e
  [ "$rc" = 137 ] || { cat "$out.killed.log"; fail "$out exited $rc, not 137 (SIGKILL)"; }
  [ -f "ck_$out/step_$(printf %08d "$step")/manifest.json" ] || fail "no checkpoint of step $step"
}

killed_after_save 6 mid --set checkpoint.dir=ck_mid
grep -q '"step":6,.*"val_loss"' mid/metrics.jsonl || { cat mid/metrics.jsonl; fail "step 6's line lost"; }
[ "$(json_get mid/report.json 'd["run"]["status"]')" = running ] \
  || fail "a run killed without a word left a report that does not say running: $(cat mid/report.json)"
run_single mid 4 1 12 "${c[@]}" --set checkpoint.dir=ck_mid
grep -q "resumed from ck_mid/step_00000006" mid.log || { cat mid.log; fail "no resume at step 6"; }
compare_metrics full/metrics.jsonl mid/metrics.jsonl --exact --min-steps 12 \
  || fail "the requeued run's metrics differ from the uninterrupted run's"

run_single fin 4 1 12 "${c[@]}" --set checkpoint.dir=ck_fin --set train.stop_after_steps=6
killed_after_save 12 fin --set checkpoint.dir=ck_fin
# (the killed run's report says it was running, from step 6: not the stopped run's it replaced)
[ "$(json_get fin/report.json 'd["run"]["status"], d["run"]["steps_completed"]')" = "running 6" ] \
  || fail "the killed run's report: $(cat fin/report.json)"
run_single fin 4 1 12 "${c[@]}" --set checkpoint.dir=ck_fin
grep -q "report.json is missing, says the run failed or was running, or is behind the checkpoint" fin.log \
  || { cat fin.log; fail "the report behind the checkpoint was not written again"; }
[ "$(json_get fin/report.json 'd["run"]["status"], d["run"]["steps_completed"]')" = "completed 12" ] \
  || fail "report after the requeue: $(cat fin/report.json)"
[ "$(json_get fin/report.json 'd["loss"]["final_train_loss"]')" = \
  "$(json_get full/report.json 'd["loss"]["final_train_loss"]')" ] || fail "final loss differs"
compare_metrics full/metrics.jsonl fin/metrics.jsonl --exact --min-steps 12 || fail "fin's metrics"
echo "a kill after a save lost no logged step; the report behind the checkpoint was rewritten"
