# checkpoint.dir removed while a 2-rank run goes on (an operator's rm -rf, a cleanup job): the next
# save fails the run on every rank (exit 1) naming the directory, instead of recreating it without
# the run's lock, where a second run could then save over this one's checkpoints.
source "$2/tests/lib/dist_common.sh"
"$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" "${small[@]}" --set model.seq_len=32 \
  --set train.steps=100000 --set checkpoint.every_steps=5 --set checkpoint.dir=ck --out run \
  >run.log 2>&1 &
launcher=$!
trap 'kill -9 $launcher 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 600); do [ -f ck/step_00000005/manifest.json ] && break; sleep 0.1; done
[ -f ck/step_00000005/manifest.json ] || { cat run.log; fail "no checkpoint at step 5 in 60 s"; }
rm -rf ck
set +e; wait $launcher; rc=$?; set -e
[ $rc -eq 1 ] || { cat run.log; fail "exit $rc after checkpoint.dir was removed, want 1"; }
grep -q 'checkpoint.dir = "ck" was removed or replaced during the run' run.log \
  || { cat run.log; fail "the failure does not name the removed checkpoint.dir"; }
[ ! -e ck ] || fail "checkpoint.dir was created again: $(ls -a ck)"
[ "$(json_get run/report.json 'd["run"]["status"]')" = failed ] || fail "report: $(cat run/report.json)"
echo "the removed checkpoint.dir stopped the run at its next save"
