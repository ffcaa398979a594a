# A second run in a directory another run is using (its run.out_dir, or a checkpoint.dir of its
# own) is refused with exit status 2 naming the directory and the run that holds it, before it
# writes anything there; the first run goes on, and its directory is free once it ends.
source "$2/tests/lib/common.sh"
cp "$src/configs/tiny.yaml" run.yaml
"$bin" train run.yaml --out first --set train.steps=100000 --set checkpoint.dir=shared_ck \
  --set checkpoint.every_steps=50000 >first.log 2>&1 &
first=$!
trap 'kill -9 $first 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 600); do
  grep -q "step " first.log 2>/dev/null && break
  kill -0 $first 2>/dev/null || { cat first.log; fail "the first run ended early"; }
  sleep 0.1
done
grep -q "step " first.log || fail "the first run logged no step in 60 s"
grep -q "^pid $first on " first/.trainer.lock || fail "first/.trainer.lock: $(cat first/.trainer.lock)"

expect_exit_2 "run.out_dir = \"first\" is in use by another run (pid $first on " "" \
  train run.yaml --out first --set train.steps=2
[ ! -e first/report.json ] || fail "the refused run wrote first/report.json"
# (its own run.out_dir, locked first, is created: empty but for the lock)
expect_exit_2 "checkpoint.dir = \"shared_ck\" is in use by another run (pid $first on " \
  second/metrics.jsonl train run.yaml --out second --set train.steps=2 \
  --set checkpoint.dir=shared_ck --set checkpoint.every_steps=1
kill -0 $first || fail "the first run died"

kill -TERM $first  # it checkpoints, reports and exits 0
wait $first || { cat first.log; fail "the first run exited $? after SIGTERM"; }
"$bin" train run.yaml --out first --set train.steps=2 --resume none >third.log 2>&1 ||
  { cat third.log; fail "the directory is still held after its run ended"; }
echo "ok: the directory is free once its run ended"
