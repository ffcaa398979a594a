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
TRAINER_TEST_FAULT="rank=1,step=5,kind=throw" timeout 120 "$bin" launch --nproc-per-node 2 "${args[@]}" --out throw >throw.log 2>&1
rc=$?
set -e
took=$(( $(date +%s) - start ))
cat throw.log | tail -5
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "launch exited $rc after a rank threw"
[ $took -le $limit ] || fail "group took ${took}s (> ${limit}s) to stop"
grep -q "launch: rank 1 exited with code 1" throw.log || fail "launcher did not name rank 1"
grep -q "injected fault" throw.log || fail "the failing rank's error was not printed"

# 2. Ranks without a launcher (as torchrun/srun start them): kill -9 rank 1; rank 0 must exit on
#    its own, naming rank 1. Then a rank that throws inside a collective: rank 0 names it too.
for kind in kill throw; do
  port=$(free_port)
  start=$(date +%s)
  fault=""; [ $kind = throw ] && fault="rank=1,step=4,kind=throw"
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TRAINER_TEST_FAULT=$fault \
    "$bin" train "${args[@]}" --out bare_$kind >bare_$kind.0.log 2>&1 &
  r0=$!
  RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TRAINER_TEST_FAULT=$fault \
    "$bin" train "${args[@]}" --out bare_$kind >bare_$kind.1.log 2>&1 &
  r1=$!
  if [ $kind = kill ]; then
    for _ in $(seq 100); do grep -q "step " bare_kill.0.log 2>/dev/null && break; sleep 0.1; done
    kill -9 $r1
  fi
  set +e
  ( sleep $((limit + 5)); kill -9 $r0 2>/dev/null ) & watchdog=$!
  wait $r0; rc=$?
  kill $watchdog 2>/dev/null
  wait $r1 2>/dev/null
  set -e
  took=$(( $(date +%s) - start ))
  tail -3 bare_$kind.0.log
  [ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "$kind: rank 0 exited $rc (137: it hung and was killed)"
  [ $took -le $limit ] || fail "$kind: rank 0 took ${took}s (> ${limit}s)"
  grep -qi "rank 1" bare_$kind.0.log || fail "$kind: rank 0's error does not name rank 1"
  [ "$(json_get bare_$kind/report.json 'd["run"]["status"]')" = failed ] || fail "$kind: no failed report"
done
echo "every failure ended the group, naming the rank"
