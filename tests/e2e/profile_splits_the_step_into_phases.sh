# logging.profile_steps: report.json's "profile" times every op of the profiled steps by phase. The
# phases' math FLOPs add up to the model's, counted here from its shape; the calls match the
# layers, micro-batches and recompute; the profiled span is the step the loop timed. Also in bf16
# with selective recompute, with two data-parallel ranks and full recompute, and in the report of
# a run that fails after its profiled steps.
source "$2/tests/lib/common.sh"
common=(--set train.steps=6 --set train.grad_accum=2 --set train.eval_every=0
        --set logging.every_steps=1 --set logging.profile_steps=2)
"$bin" train "$src/configs/tiny.yaml" "${common[@]}" --out plain >log 2>&1 || { cat log; fail "train failed"; }
grep -q "profile of 2 step(s) from step 4" log || { cat log; fail "no profile table in the log"; }
"$bin" train "$src/configs/tiny.yaml" "${common[@]}" --set precision.compute=bf16 \
  --set activation_checkpointing=selective --out bf16 >log3 2>&1 || { cat log3; fail "bf16 run failed"; }
"$bin" launch --nproc-per-node 2 "$src/configs/tiny.yaml" "${common[@]}" \
  --set activation_checkpointing=full --out dp2 >log2 2>&1 || { cat log2; fail "dp=2 run failed"; }
/usr/bin/python3 - <<'PY'
import json
def check(out, dp, recompute):  # recompute: none | full | selective
    r = json.load(open(f"{out}/report.json"))
    p = r["profile"]
    assert p["steps"] == 2 and p["first_step"] == 4, p
    L, C, T, V = r["model"]["n_layer"], r["model"]["d_model"], r["batch"]["seq_len"], r["model"]["padded_vocab_size"]
    accum = r["batch"]["grad_accum"]
    seqs = r["batch"]["micro_batch"] * accum           # this rank's sequences per step
    tokens = seqs * T
    attention = seqs * L * 2 * C * T * (T + 1)  # causal, forward
    block = tokens * 24 * C * C * L + attention  # and the four linear layers
    head = tokens * 2 * C * V
    want = 3 * (block + head) + {"none": 0, "full": block, "selective": attention}[recompute]
    phases = {q["name"]: q for q in p["phases"]}
    got = sum(q["tflops"] * 1e12 * q["time_s"] for q in p["phases"] if q["tflops"] is not None)
    assert abs(got - want) <= 1e-9 * want, f"{out}: phase FLOPs {got:.6g} != model FLOPs {want:.6g}"
    for op in ["ln1", "qkv", "attention", "proj", "ln2", "fc_gelu", "fc_proj"]:
        assert phases["fwd." + op]["calls_per_step"] == L * accum, (op, phases["fwd." + op])
        redone = recompute == "full" or (recompute == "selective" and op == "attention")
        assert ("recompute." + op in phases) == redone, op
    for op in ["fc_proj", "fc", "ln2", "proj", "attention", "qkv", "ln1"]:
        assert phases["bwd." + op]["calls_per_step"] == L * accum, op
    for op in ["fwd.embedding", "fwd.head", "fwd.cross_entropy", "bwd.head", "bwd.embedding"]:
        assert phases[op]["calls_per_step"] == accum, op
    for op in ["optimizer", "grad_reduce_and_norm", "zero_grads"]:
        assert phases[op]["calls_per_step"] == 1, op
    # every unit's gradients go to the buckets (L blocks, the embedding, the final norm)
    assert phases["bwd.hook.grads_ready"]["calls_per_step"] == (L + 2) * accum
    assert ("loss_all_reduce" in phases) == (dp > 1)
    assert p["unaccounted_s"] >= -1e-9 and p["unaccounted_s"] < 0.5 * p["step_time_s"], p
    times = [json.loads(l)["step_time_s"] for l in open(f"{out}/metrics.jsonl")]
    loop = sum(times[3:5]) / 2  # steps 4 and 5 as the loop timed them
    # the span misses only the host work before the first and after the last timed op: 0.1% of
    # the step or 2 ms, whichever is more (under AddressSanitizer 1 ms, 0.2%, of a 538 ms step)
    assert loop - max(0.001 * loop, 0.002) <= p["step_time_s"] <= loop + 0.05, (p["step_time_s"], loop)
    print(f"{out}: {len(phases)} phases, {got:.4g} FLOPs/step, span {p['step_time_s']*1e3:.1f} ms "
          f"(loop {loop*1e3:.1f} ms), {p['unaccounted_s']*1e3:.2f} ms in no phase")
check("plain", 1, "none")
check("bf16", 1, "selective")
check("dp2", 2, "full")
PY
# A run that fails after its profiled steps still reports them (the profile is logged as its
# window ends, before the failure).
set +e
TRAINER_TEST_FAULT="rank=0,step=7,kind=throw" "$bin" train "$src/configs/tiny.yaml" "${common[@]}" \
  --set train.steps=8 --out failed >logf 2>&1; rc=$?
set -e
[ $rc != 0 ] || fail "the injected fault did not fail the run"
grep -q "profile of 2 step(s) from step 4" logf || { cat logf; fail "no profile table before the failure"; }
[ "$(json_get failed/report.json "d['run']['status'], d['profile']['steps'], d['profile']['first_step']")" = \
  "failed 2 4" ] || fail "failed run's report: $(json_get failed/report.json "d['run'], d.get('profile')")"
# (off by default: tiny_trains_and_writes_report; a negative count: bad_config_exits_2_naming_the_key)
echo "profile ok"
