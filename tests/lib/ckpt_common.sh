# Helpers of the checkpoint resume tests (after dist_common.sh): runs that resume at step 20.
# tail_of METRICS: steps 21.. of a metrics file
tail_of() {
  /usr/bin/python3 -c "
import json,sys
for l in open(sys.argv[1]):
    if json.loads(l)['step'] > 20: print(l, end='')" "$1"
}
# check_resumed NAME REF_TAIL [compare_metrics options]: run NAME resumed, and its steps match
check_resumed() {
  local name=$1 ref=$2
  shift 2
  grep -q "resumed from" $name.log || { cat $name.log; fail "$name did not resume"; }
  echo "$name:"
  compare_metrics $ref $name/metrics.jsonl --min-steps 5 "$@" || fail "$name differs from $ref"
}
# check_saved_once MANIFEST: the checkpoint's pieces hold every element of every tensor once
check_saved_once() {
  /usr/bin/python3 - "$1" <<'PY' || fail "checkpoint $1 does not hold each element once"
import json, math, sys
m = json.load(open(sys.argv[1]))
saved = {}
for f in m["shards"]:
    for p in f["pieces"]:
        saved[p["tensor"]] = saved.get(p["tensor"], 0) + p["range"][1] - p["range"][0]
for t in m["tensors"]:
    assert saved.get(t["name"]) == math.prod(t["global_shape"]), (t, saved.get(t["name"]))
print("%d tensors, each element saved once, in %d files" % (len(m["tensors"]), len(m["shards"])))
PY
}
