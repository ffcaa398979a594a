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
  "$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" "${small[@]}" "${c[@]}" \
    --set train.micro_batch=4 --set checkpoint.dir=ck_$name --out $name "$@" >$name.log 2>&1 &
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
