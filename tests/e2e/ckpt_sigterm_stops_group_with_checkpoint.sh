# SIGTERM to the launcher, or to one rank only, makes the whole group save a checkpoint at the
# end of the current step and exit 0; the checkpoint's step is the last logged step, and
# --resume continues from there. The same with pp 2 (SIGTERM to one stage), and with SIGTERM sent
# to a rank twice (under Slurm the step's daemon sends one and srun forwards its own). SIGUSR1 to a
# rank (Slurm's --signal=USR1@SECONDS) and SIGHUP to the launcher (a closed terminal) stop the
# same way.
source "$2/tests/lib/dist_common.sh"
c=(--set model.seq_len=32 --set train.steps=100000)
stop_run() {  # stop_run NAME WHO(launcher|rank|rank_twice|rank_usr1|launcher_hup) [args]
  local name=$1 who=$2
  shift 2
  # (SIGHUP at its default: a launcher that finds it ignored keeps it so, as under nohup, and a
  # test run from a job runner that ignores it waited for the hup_launcher case until its timeout;
  # python, as env --default-signal needs coreutils 9)
  /usr/bin/python3 -c 'import os, signal as s, sys
for sig in (s.SIGHUP, s.SIGPIPE): s.signal(sig, s.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" "${small[@]}" \
    "${c[@]}" --set train.micro_batch=4 --set checkpoint.dir=ck_$name --out $name "$@" >$name.log 2>&1 &
  local launcher=$!
  for _ in $(seq 600); do [ "$(cat $name/metrics.jsonl 2>/dev/null | wc -l)" -ge 3 ] && break; sleep 0.1; done
  local rank_pid
  rank_pid=$(pgrep -P $launcher | tail -1)
  case $who in
    launcher) kill -TERM $launcher ;;
    rank) kill -TERM "$rank_pid" ;;
    rank_twice) kill -TERM "$rank_pid" && kill -TERM "$rank_pid" ;;
    rank_usr1) kill -USR1 "$rank_pid" ;;
    launcher_hup) kill -HUP $launcher ;;
  esac
  set +e; wait $launcher; local rc=$?; set -e
  [ $rc -eq 0 ] || { cat $name.log; fail "$name: exit $rc after SIGTERM to the $who, want 0"; }
  local last saved
  last=$(tail -1 $name/metrics.jsonl | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['step'])")
  saved=$("$bin" ckpt inspect ck_$name | sed -n 's/^step \([0-9]*\),.*/\1/p')
  [ "$last" = "$saved" ] || fail "$name: last logged step $last, checkpoint step $saved"
  echo "SIGTERM to the $who: group exited 0, checkpoint at step $saved = last logged step"
}
stop_run term_launcher launcher
stop_run term_rank rank
stop_run term_rank_pp rank --set parallel.pp=2 --set parallel.pipeline.microbatches=2
stop_run term_rank_twice rank_twice
stop_run usr1_rank rank_usr1
stop_run hup_launcher launcher_hup
saved=$("$bin" ckpt inspect ck_term_rank | sed -n 's/^step \([0-9]*\),.*/\1/p')
run_launch again 2 4 1 100000 --set model.seq_len=32 --set checkpoint.dir=ck_term_rank \
  --set train.stop_after_steps=$((saved + 1))
grep -q "resumed from ck_term_rank/step_" again.log || { cat again.log; fail "no resume"; }
first=$(head -1 again/metrics.jsonl | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['step'])")
[ "$first" = $((saved + 1)) ] || fail "resumed run starts at step $first, want $((saved + 1))"
echo "resumed at step $first"

# A stop signal that lands on an eval step (here sent by the rank to itself at the start of step
# 6, eval_every 6) checkpoints without that eval, so a long eval cannot outlast the scheduler's
# grace period; the eval of the last step still runs. With checkpoint.every_steps the last step is
# saved too when no multiple lands on it (a requeue of the finished run then trains nothing).
ev=(--set train.eval_every=6 --set train.eval_batches=2 --set checkpoint.every_steps=5)
TRAINER_TEST_FAULT="rank=0,step=6,kind=sigterm" "$bin" train "$src/configs/tiny.yaml" \
  "${small[@]}" --set model.seq_len=32 --set train.steps=12 --set checkpoint.dir=ck_ev "${ev[@]}" \
  --out ev >ev.log 2>&1 || { cat ev.log; fail "the run stopped at an eval step failed"; }
grep -q "stop signal: the eval of step 6 is skipped to checkpoint now" ev.log || { cat ev.log; fail "eval not skipped"; }
! grep -q '"step":6,.*val_loss' ev/metrics.jsonl || fail "step 6 evaluated before its stop"
[ -d ck_ev/step_00000006 ] || fail "no checkpoint at the stop: $(ls ck_ev)"
TRAINER_TEST_FAULT="rank=0,step=12,kind=sigterm" "$bin" train "$src/configs/tiny.yaml" \
  "${small[@]}" --set model.seq_len=32 --set train.steps=12 "${ev[@]}" \
  --set checkpoint.dir=ck_last --out ev_last >ev_last.log 2>&1 \
  || { cat ev_last.log; fail "the run stopped at its last step failed"; }
grep -q '"step":12,.*val_loss' ev_last/metrics.jsonl || fail "the last step's eval was skipped"
"$bin" train "$src/configs/tiny.yaml" \
  "${small[@]}" --set model.seq_len=32 --set train.steps=12 --set checkpoint.dir=ck_ev "${ev[@]}" \
  --out ev >ev2.log 2>&1 || { cat ev2.log; fail "the resumed run failed"; }
[ "$(ls ck_ev)" = "$(printf 'step_00000010\nstep_00000012')" ] || fail "checkpoints: $(ls ck_ev)"
echo "a stop at an eval step skipped the eval; the last step evaluated and saved"

# A stop signal that comes during an eval (step 6's) stops at that step, with its eval: the
# checkpoint is step 6's, not the next step's.
TRAINER_TEST_FAULT="rank=0,step=6,kind=sigterm_in_eval" "$bin" train "$src/configs/tiny.yaml" \
  "${small[@]}" --set model.seq_len=32 --set train.steps=12 --set checkpoint.dir=ck_in_ev \
  "${ev[@]}" --out in_ev >in_ev.log 2>&1 || { cat in_ev.log; fail "the run stopped in an eval failed"; }
grep -q '"step":6,.*val_loss' in_ev/metrics.jsonl || fail "step 6's eval is missing"
[ "$(ls ck_in_ev | tail -1)" = step_00000006 ] || fail "a signal during step 6's eval saved: $(ls ck_in_ev)"
[ "$(tail -1 in_ev/metrics.jsonl | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['step'])")" = 6 ] \
  || fail "steps ran after a signal during step 6's eval"
echo "a signal during an eval stopped at that eval's step"

# Without checkpoint.every_steps a run that resumed from a stop's checkpoint saves its last step
# too: a re-run of the finished job trains nothing (it trained the steps after the stop again).
nc=(--set train.eval_every=0 --set checkpoint.every_steps=0 --set checkpoint.dir=ck_nc)
TRAINER_TEST_FAULT="rank=0,step=4,kind=sigterm" "$bin" train "$src/configs/tiny.yaml" \
  "${small[@]}" --set model.seq_len=32 --set train.steps=8 "${nc[@]}" --out nc >nc1.log 2>&1 \
  || { cat nc1.log; fail "the stopped run failed"; }
for i in 2 3; do
  "$bin" train "$src/configs/tiny.yaml" "${small[@]}" --set model.seq_len=32 --set train.steps=8 \
    "${nc[@]}" --out nc >nc$i.log 2>&1 || { cat nc$i.log; fail "run $i failed"; }
done
[ "$(ls ck_nc)" = "$(printf 'step_00000004\nstep_00000008')" ] || fail "checkpoints: $(ls ck_nc)"
grep -q "nothing to train: resumed at step 8" nc3.log || { cat nc3.log; fail "the re-run trained again"; }
echo "a run resumed from a stop's checkpoint saved its last step; its re-run trained nothing"
