# One process, run.deterministic: 40 steps straight vs 20 steps (stop_after_steps) + --resume auto
# for 20 more give bit-identical losses at every step, val losses at the same steps (15, 30 and
# the last; none where stop_after_steps stopped) and byte-identical exported weights; resumed in
# the same out_dir, its report.json has the whole run's loss curve.
source "$2/tests/lib/dist_common.sh"
det=(--set run.deterministic=true --set model.seq_len=32 --set checkpoint.every_steps=40
     --set train.eval_every=15 --set train.eval_batches=2)
run_single full 8 1 40 "${det[@]}" --set checkpoint.dir=ck_full
run_single part1 8 1 40 "${det[@]}" --set checkpoint.dir=ck_part --set train.stop_after_steps=20
[ -d ck_part/step_00000020 ] || fail "stop_after_steps=20 wrote no checkpoint: $(ls ck_part)"
# A step directory without a manifest (damage from outside: the writer commits the manifest
# last) is never loaded: --resume auto takes the newest complete one and says what it ignored.
mkdir ck_part/step_00000030
run_single part2 8 1 40 "${det[@]}" --set checkpoint.dir=ck_part --resume auto
grep -q "resumed from ck_part/step_00000020" part2.log || { cat part2.log; fail "part2 did not resume"; }
grep -q "ignoring incomplete write ck_part/step_00000030" part2.log \
  || { cat part2.log; fail "the manifest-less step_00000030 was not named"; }
rmdir ck_part/step_00000030
check_resume_exact full/metrics.jsonl part1/metrics.jsonl part2/metrics.jsonl 40 run
/usr/bin/python3 - <<'PY' || fail "val losses of the resumed pair differ from the uninterrupted run's"
import json
def vals(path):
    return {r["step"]: r["val_loss"] for r in map(json.loads, open(path)) if "val_loss" in r}
full, joined = vals("full/metrics.jsonl"), vals("joined.jsonl")
print(f"val losses: uninterrupted {full}, stopped and resumed {joined}")
assert sorted(full) == [15, 30, 40] and joined == full
PY
"$bin" ckpt export ck_full --out full.safetensors >/dev/null
"$bin" ckpt export ck_part --out part.safetensors >/dev/null
cmp full.safetensors part.safetensors || fail "final weights differ"
echo "40 losses bit-identical; final weights identical"
# Stopped and resumed in one out_dir, as a requeued job is: the resumed run's report.json has the
# whole run's loss curve and its last val loss (the points metrics.jsonl logged before the
# resume, then its own), equal to the uninterrupted run's, and so are its stability counts (the
# checkpoint carries the steps' totals); its throughput covers its 20 steps.
run_single same 8 1 40 "${det[@]}" --set checkpoint.dir=ck_same --set train.stop_after_steps=20
run_single same 8 1 40 "${det[@]}" --set checkpoint.dir=ck_same --resume auto
# The same logging every 7 steps, stopped at 20 (not a multiple): the curve has the points at
# 1, 7, 14, 21, 28, 35 and 40, whatever the stopped run logged at its eval and stop steps.
every7=(--set logging.every_steps=7)
run_single full7 8 1 40 "${det[@]}" "${every7[@]}" --set checkpoint.dir=ck_full7
run_single same7 8 1 40 "${det[@]}" "${every7[@]}" --set checkpoint.dir=ck_same7 \
  --set train.stop_after_steps=20
run_single same7 8 1 40 "${det[@]}" "${every7[@]}" --set checkpoint.dir=ck_same7 --resume auto
/usr/bin/python3 - <<'PY' || fail "the resumed run's report does not cover the whole run"
import json
for a, b, points in (("full", "same", 40), ("full7", "same7", 7)):
    full, same = (json.load(open(p + "/report.json")) for p in (a, b))
    print("%s: curve points: uninterrupted %d, resumed %d; val_loss %s / %s" % (
        b, len(full["loss"]["curve"]), len(same["loss"]["curve"]), full["loss"]["val_loss"],
        same["loss"]["val_loss"]))
    assert same["loss"]["curve"] == full["loss"]["curve"], (full["loss"]["curve"], same["loss"]["curve"])
    assert len(full["loss"]["curve"]) == points
    for k in ("val_loss", "val_at_tokens", "final_train_loss", "tokens_seen"):
        assert same["loss"][k] == full["loss"][k], k
    # the step the run reached, and the steps this process ran
    assert same["run"]["resumed_from_step"] == 20 and same["run"]["steps_completed"] == 40
    assert same["run"]["steps_run"] == 20
    # the stability counts cover the whole run (the checkpoint carried the first 20 steps')
    for k in ("steps_counted", "clipped_steps", "nonfinite_steps", "grad_norm"):
        assert same["stability"][k] == full["stability"][k], (k, full["stability"], same["stability"])
    assert same["stability"]["steps_counted"] == 40 and full["stability"]["clipped_steps"] > 0
PY
# The report of the run stopped at step 20 says so; the uninterrupted one completed.
[ "$(json_get part1/report.json 'd["run"]["status"], d["run"]["steps_planned"], d["run"]["steps_completed"]')" \
  = "stopped 40 20" ] || fail "stopped run's report: $(json_get part1/report.json 'd["run"]')"
[ "$(json_get full/report.json 'd["run"]["status"]')" = completed ] || fail "full run not completed"
# Running the finished job again (a requeue) trains nothing and leaves its outputs as they were.
cp part2/report.json part2.report && cp part2/metrics.jsonl part2.metrics
run_single part2 8 1 40 "${det[@]}" --set checkpoint.dir=ck_part --resume auto
grep -q "nothing to train: resumed at step 40" part2.log || { cat part2.log; fail "no 'nothing to train'"; }
cmp part2.report part2/report.json && cmp part2.metrics part2/metrics.jsonl \
  || fail "a run with nothing to train rewrote report.json or metrics.jsonl"
# Unless its report was lost (a full disk as it was written) or says it failed (the job died
# after its last checkpoint): the requeue writes it again, completed, with the whole run's loss.
for lost in missing failed; do
  if [ $lost = missing ]; then rm part2/report.json; else
    /usr/bin/python3 -c "import json; r = json.load(open('part2.report')); r['run']['status'] = 'failed'
json.dump(r, open('part2/report.json', 'w'))"
  fi
  run_single part2 8 1 40 "${det[@]}" --set checkpoint.dir=ck_part --resume auto
  grep -q "nothing to train: resumed at step 40.*written again" part2.log || { cat part2.log; fail "$lost: not rewritten"; }
  /usr/bin/python3 - <<'PY' || fail "$lost: the rewritten report is not the run's"
import json
old, new = json.load(open("part2.report")), json.load(open("part2/report.json"))
assert new["run"]["status"] == "completed" and new["run"]["steps_completed"] == 40, new["run"]
assert new["run"]["steps_run"] == 0 and new["run"]["resumed_from_step"] == 40, new["run"]
for k in ("curve", "final_train_loss", "tokens_seen", "val_loss", "val_at_tokens"):
    assert new["loss"][k] == old["loss"][k], (k, old["loss"][k], new["loss"][k])
PY
  cmp part2.metrics part2/metrics.jsonl || fail "$lost: metrics.jsonl changed"
done
# A run that would start below the checkpoints already in checkpoint.dir (a fresh start, or a
# rewind to an older step) is refused with status 2 before it writes anything: its checkpoints
# would be mixed with the earlier run's (retention would delete the ones it saves; --resume auto
# would continue the earlier run).
refused() {  # refused OUT "message part" train args...
  local out=$1 want=$2
  shift 2
  expect_exit_2 "$want" "$out" train "$src/configs/tiny.yaml" "${small[@]}" "${det[@]}" \
    --set checkpoint.dir=ck_part --out "$out" "$@"
}
refused rewind "holds step_00000040 of an earlier run, past step 20" --resume ck_part/step_00000020
refused fresh "holds step_00000020, step_00000040 of an earlier run, past step 0" --resume none
refused nowhere "--resume ck_nowhere: no such directory" --resume ck_nowhere
mkdir -p not_a_ckpt
refused not_ckpt "--resume not_a_ckpt: no checkpoint (no manifest.json, no step_* dirs)" \
  --resume not_a_ckpt
[ "$(ls ck_part | tr '\n' ' ')" = "step_00000020 step_00000040 " ] \
  || fail "a refused run touched the checkpoints: $(ls ck_part)"
echo "starts below existing checkpoints refused"
# A resume with a larger global batch counts tokens from the checkpoint's: 20 steps of 8 x 32
# tokens, then 16 x 32 per step.
mkdir -p ck_batch && cp -r ck_part/step_00000020 ck_batch/
run_single batch 16 1 22 "${det[@]}" --set checkpoint.dir=ck_batch --resume auto
[ "$(json_get batch/report.json 'd["loss"]["tokens_seen"]')" = "6144" ] \
  || fail "tokens after the resume: $(cat batch/metrics.jsonl)"
/usr/bin/python3 - <<'PY' || fail "tokens per step after the resume: $(cat batch/metrics.jsonl)"
import json
rows = [json.loads(l) for l in open("batch/metrics.jsonl")]
assert [(r["step"], r["tokens"]) for r in rows] == [(21, 5632), (22, 6144)], rows
PY
# and names what it changed since the checkpoint
grep -q "setting(s) changed since the checkpoint: .*train.micro_batch: 8 -> 16" batch.log \
  || { cat batch.log; fail "the resume did not name the changed micro_batch"; }
