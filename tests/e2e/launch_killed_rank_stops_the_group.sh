# A rank killed mid-run (kill -9) stops the whole group: the launcher reports that rank, stops the
# others (SIGTERM, SIGKILL after --grace-s) and exits 128+9, well before the run would finish.
source "$2/tests/lib/common.sh"
cp "$src/configs/tiny.yaml" run.yaml
"$bin" launch --nproc-per-node 2 --grace-s 3 run.yaml --set train.steps=100000 \
  --set run.out_dir=out >launch.log 2>&1 &
launcher=$!
children() { cat /proc/$launcher/task/*/children 2>/dev/null | tr ' ' '\n' | grep . || true; }
for _ in $(seq 100); do [ "$(children | wc -l)" -ge 2 ] && break; sleep 0.1; done
sleep 3  # let the ranks rendezvous and start stepping
ranks=$(children)
victim=$(echo "$ranks" | tail -n 1)
[ -n "$victim" ] || { cat launch.log; fail "no ranks running"; }
kill -9 "$victim"
start=$SECONDS
set +e; wait $launcher; rc=$?; set -e
elapsed=$((SECONDS - start))
[ "$rc" = 137 ] || { cat launch.log; fail "launch exited $rc, not 137"; }
grep -qE '^launch: rank [01] killed by signal 9$' launch.log || { cat launch.log; fail "no report"; }
[ "$elapsed" -le 20 ] || fail "took ${elapsed}s to stop the group"
for p in $ranks; do  # gone, or a zombie not yet reaped by init
  [ ! -e /proc/$p ] || grep -q '^[0-9]* (.*) Z' /proc/$p/stat || fail "rank pid $p survived"
done
echo "ok: group stopped ${elapsed}s after the kill, exit $rc"
