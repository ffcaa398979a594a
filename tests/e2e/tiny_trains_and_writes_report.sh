# The embedded default trains, logs progress, lowers the loss toward the data's entropy floor, and
# writes metrics.jsonl and a report.json holding every DESIGN.md field.
source "$2/tests/lib/common.sh"
"$bin" train "$src/configs/tiny.yaml" --set train.steps=60 --set train.warmup_steps=5 \
  --set train.eval_every=30 --set logging.every_steps=10 --out out >log 2>&1 || { cat log; fail "train failed"; }
cat log
grep -q "step .*loss" log || fail "no progress line"
grep -q "report: out/report.json" log || fail "report path not printed"
[ "$(wc -l < out/metrics.jsonl)" -ge 6 ] || fail "metrics.jsonl too short"
/usr/bin/python3 - out/report.json out/metrics.jsonl <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
need = {
 "run": ["name", "config_sha256", "git_rev", "started_at", "finished_at", "status", "resumed_from_step"],
 "hardware": ["device_type", "device_name", "device_count", "nodes", "peak_tflops_per_device", "peak_source",
              "kernels"],
 "parallel": ["world_size", "dp", "tp", "pp", "cp", "ep", "zero_stage", "sequence_parallel",
              "pipeline_schedule", "microbatches", "activation_checkpointing", "precision"],
 "batch": ["micro_batch", "grad_accum", "seq_len", "global_batch_sequences", "tokens_per_step"],
 "model": ["arch", "params", "n_layer", "d_model", "n_head", "vocab_size", "flops_per_token"],
 "throughput": ["tokens_per_second", "tokens_per_second_per_device", "tflops_per_device", "mfu",
                "step_time_s", "warmup_steps_excluded"],
 "memory": ["peak_bytes_per_rank", "breakdown"],
 "loss": ["final_train_loss", "tokens_seen", "val_loss", "val_at_tokens", "curve"],
 "stability": ["grad_norm", "clipped_steps", "loss_spikes", "nonfinite_steps"],
 "stragglers": ["slowest_rank", "slowest_over_median_step_time"],
 "data": ["train", "entropy_floor"],
}
assert r["schema"] == "trainer.report/1", r["schema"]
for sec, keys in need.items():
    for k in keys:
        assert k in r[sec], f"report.json lacks {sec}.{k}"
assert r["run"]["status"] == "completed"
assert "profile" not in r, "a profile in a report without logging.profile_steps"
assert r["peak_source" if False else "hardware"]["peak_source"] == "measured-sgemm"
assert r["hardware"]["kernels"] == {}, r["hardware"]["kernels"]  # the cpu backend has no choices
assert r["batch"]["tokens_per_step"] == 8 * 128
assert r["loss"]["tokens_seen"] == 60 * 8 * 128
m = [json.loads(l) for l in open(sys.argv[2])]
first, last = m[0]["loss"], m[-1]["loss"]
floor = r["data"]["entropy_floor"]
print(f"loss {first:.3f} -> {last:.3f}, entropy floor {floor:.3f}, mfu {r['throughput']['mfu']}")
assert abs(first - math.log(256)) < 0.5, f"initial loss {first} is not ~ln(256)"
assert last < first - 1.0, "the loss did not fall"
assert last > floor - 0.05, f"loss {last} below the entropy floor {floor}: data leak or bad loss"
val = r["loss"]["val_loss"]
# The full 300-step run ends within 10% of the floor; this 60-step run must be within 80% of it.
assert val < 1.8 * floor, f"val loss {val} after {r['loss']['tokens_seen']} tokens is not < 1.8 x floor {floor}"
assert r["loss"]["val_at_tokens"] == 60 * 8 * 128
for row in m:
    for k in ["step", "tokens", "loss", "grad_norm", "lr", "step_time_s", "tokens_per_second", "mfu"]:
        assert k in row, f"metrics line lacks {k}: {row}"
assert any("val_loss" in row for row in m), "no eval line"
PY
echo "report ok"
# trainer compare puts two reports side by side with ratios to the first.
"$bin" compare out/report.json out/report.json > compare.txt || { cat compare.txt; fail "compare failed"; }
cat compare.txt
grep -q "1.00x" compare.txt || fail "compare shows no ratio"
set +e; "$bin" compare out/report.json missing.json >/dev/null 2>err.txt; rc=$?; set -e
[ $rc = 2 ] && grep -q missing.json err.txt || fail "compare of a missing report: exit $rc, $(cat err.txt)"
# run.git_rev names a commit of this source (taken at build time, "-dirty.<8 hex>" when tracked
# files differed; commits since the build may be newer, so HEAD itself is not required).
built=$(json_get out/report.json 'd["run"]["git_rev"]')
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  [[ "$built" =~ ^[0-9a-f]{7,}(-dirty\.[0-9a-f]{8})?$ ]] && git -C "$src" cat-file -e "${built%-dirty.*}^{commit}" \
    || fail "report git_rev '$built' is not a commit of $src"
else
  [ "$built" = unknown ] || fail "report git_rev '$built' outside a git checkout"
fi
# An MFU above 100% (a peak below what the steps reach) is said once, naming the peak's source.
"$bin" train "$src/configs/tiny.yaml" --set model.n_layer=1 --set train.steps=12 \
  --set hardware.peak_tflops=0.0001 --out low_peak >low_peak.log 2>&1 || { cat low_peak.log; fail "low-peak run failed"; }
[ "$(grep -c 'above the peak MFU divides by, 0.0001 (config)' low_peak.log)" = 1 ] \
  || { cat low_peak.log; fail "an MFU above 100% is not warned of once"; }
