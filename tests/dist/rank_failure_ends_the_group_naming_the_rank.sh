# When one rank dies, nothing hangs: every other rank exits non-zero within timeout + 10 s with a
# message naming the failed rank, and `trainer launch` exits with the first failing rank's code.
source "$2/tests/lib/dist_common.sh"
timeout_s=10
args=("$src/configs/tiny.yaml" "${small[@]}" --set train.steps=200 --set train.micro_batch=2
      --set distributed.timeout_s=$timeout_s)
limit=$((timeout_s + 10))

# 1. A rank that throws (an exception mid-run) under trainer launch.
start=$(date +%s)
set +e
TRAINER_TEST_FAULT="rank=1,step=5,kind=throw" timeout 120 "$bin" launch --nproc-per-node 2 "${args[@]}" \
  --set parallel.zero=3 --out throw >throw.log 2>&1
rc=$?
set -e
took=$(( $(date +%s) - start ))
cat throw.log | tail -5
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "launch exited $rc after a rank threw"
[ $took -le $limit ] || fail "group took ${took}s (> ${limit}s) to stop"
grep -q "launch: rank 1 exited with code 1" throw.log || fail "launcher did not name rank 1"
grep -q "injected fault" throw.log || fail "the failing rank's error was not printed"
# Rank 0's report says failed, with what it knows: the memory it held up to its last step (ZeRO
# 3's params and staging peak during steps); no straggler or peak figures, which need every
# rank's (null, not made up).
/usr/bin/python3 - <<'PY' || fail "the failed run's report: $(cat throw/report.json)"
import json
r = json.load(open("throw/report.json"))
assert r["run"]["status"] == "failed", r["run"]
assert r["stragglers"] == {"slowest_rank": None, "slowest_over_median_step_time": None}, r["stragglers"]
assert r["memory"]["peak_bytes_per_rank"] == {"max": None, "mean": None}, r["memory"]
b = r["memory"]["breakdown"]
assert b["params"] > 0 and b["grads"] > 0 and b["zero_staging"] > 0 and b["activations"] > 0, b
PY

# 2. Ranks without a launcher (as torchrun/srun start them), one rank surviving each failure:
#    kill -9 of rank 1; rank 1 throwing inside a collective; kill -9 of rank 0, which serves the
#    store (rank 1 must not wait for it, and names it); rank 1 stopped (SIGSTOP: alive but hung)
#    with many small gradient buckets queued (rank 0 must not wait the timeout once per bucket);
#    and kill -9 of the last of 2 pipeline stages, and the last stage throwing mid-schedule (the
#    first stage waits in a point-to-point exchange with it).
for kind in kill throw kill0 stop ppkill ppthrow; do
  port=$(free_port)
  start=$(date +%s)
  fault=""; case $kind in *throw) fault="rank=1,step=4,kind=throw" ;; esac
  # (about 25 buckets: waiting the timeout once per queued bucket would take minutes)
  extra=(); [ $kind = stop ] && extra=(--set parallel.bucket_mb=0.02)
  case $kind in pp*) extra=(--set parallel.pp=2 --set parallel.pipeline.microbatches=2) ;; esac
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TRAINER_TEST_FAULT=$fault \
      "$bin" train "${args[@]}" "${extra[@]}" --out bare_$kind >bare_$kind.$r.log 2>&1 &
    pids[$r]=$!
  done
  victim=1; [ $kind = kill0 ] && victim=0
  survivor=$((1 - victim))
  if [ -z "$fault" ]; then
    # the limit counts from the failure, not from a start that a loaded machine may slow down
    for _ in $(seq 300); do grep -q "step " bare_$kind.0.log 2>/dev/null && break; sleep 0.1; done
    grep -q "step " bare_$kind.0.log || { cat bare_$kind.0.log; fail "$kind: the run never started"; }
    if [ $kind = stop ]; then kill -STOP ${pids[$victim]}; else kill -9 ${pids[$victim]}; fi
    start=$(date +%s)
  fi
  set +e
  # Poll rather than run a watchdog subshell: a subshell killed before it has set its own traps
  # runs this shell's EXIT trap, which removes $work under the test (seen once in CI). bash reaps
  # an exited child at once, so kill -0 fails for it, and wait still returns its status.
  deadline=$((SECONDS + limit + 5))
  while kill -0 ${pids[$survivor]} 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
  [ $SECONDS -lt $deadline ] || kill -9 ${pids[$survivor]} 2>/dev/null  # hung: exits 137
  wait ${pids[$survivor]}; rc=$?
  kill -9 ${pids[$victim]} 2>/dev/null
  wait ${pids[$victim]} 2>/dev/null
  set -e
  took=$(( $(date +%s) - start ))
  tail -3 bare_$kind.$survivor.log
  [ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "$kind: rank $survivor exited $rc (137: it hung and was killed)"
  # (141: SIGPIPE from writing to the dead peer's socket, silent: Gloo's writes must not raise it)
  [ $rc -ne 141 ] || fail "$kind: rank $survivor died of SIGPIPE (exit 141) instead of naming rank $victim"
  [ $took -le $limit ] || fail "$kind: rank $survivor took ${took}s (> ${limit}s)"
  grep -qiE "rank $victim|did not arrive: $victim " bare_$kind.$survivor.log \
    || fail "$kind: rank $survivor's error does not name rank $victim"
  if [ $survivor = 0 ]; then
    [ "$(json_get bare_$kind/report.json 'd["run"]["status"]')" = failed ] || fail "$kind: no failed report"
  fi
done
# 3. Three pipeline stages, the middle one stopped: each end names it, and never the other, healthy
#    end, as missing beside it. (The ends count their pipeline ops differently; compared as one
#    op, each said the other "did not arrive" too.) An end that finished its part of the step
#    before the stop waits in the tied-embedding swap for the other end instead, and names that
#    end as not arrived, blocked in turn on rank 1: the chain still ends at 1.
port=$(free_port)
for r in 0 1 2; do
  RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin" train "${args[@]}" --set model.n_layer=3 --set parallel.pp=3 \
      --set parallel.pipeline.microbatches=2 --out bare_pp3 \
    >bare_pp3.$r.log 2>&1 &
  pids[$r]=$!
done
for _ in $(seq 300); do grep -q "step " bare_pp3.0.log 2>/dev/null && break; sleep 0.1; done
grep -q "step " bare_pp3.0.log || { cat bare_pp3.0.log; fail "pp3: the run never started"; }
kill -STOP ${pids[1]}
start=$(date +%s)
set +e
deadline=$((SECONDS + limit + 5))
while { kill -0 ${pids[0]} || kill -0 ${pids[2]}; } 2>/dev/null && [ $SECONDS -lt $deadline ]; do
  sleep 0.2
done
kill -9 ${pids[0]} ${pids[2]} 2>/dev/null  # hung: they exit 137
wait ${pids[0]}; rc0=$?
wait ${pids[2]}; rc2=$?
kill -9 ${pids[1]} 2>/dev/null
wait ${pids[1]} 2>/dev/null
set -e
took=$(( $(date +%s) - start ))
[ $took -le $((limit + 1)) ] || fail "pp3: the ends took ${took}s (> ${limit}s)"
for r in 0 2; do
  rc=rc$r
  [ ${!rc} -ne 0 ] && [ ${!rc} -ne 137 ] || fail "pp3: rank $r exited ${!rc} (137: it hung)"
  tail -2 bare_pp3.$r.log
  other=$((2 - r))
  said=$(grep -oE "did not arrive: [0-9]+(, [0-9]+)*" bare_pp3.$r.log | sort -u)
  if [ "$said" = "did not arrive: $other" ]; then
    grep -q "did not arrive: $other, blocked in turn on rank(s) 1 " bare_pp3.$r.log \
      || fail "pp3: rank $r named rank $other, not through it rank 1"
  else
    [ "$said" = "did not arrive: 1" ] || fail "pp3: rank $r said '$said', not rank 1 alone"
  fi
done
echo "every failure ended the group, naming the rank"
