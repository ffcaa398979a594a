# Mixture-of-experts dist tests: the model (4 experts, top 2, capacity factor 1: some choices are
# dropped) at seq 32, its single-process reference `ref` (8 sequences a step, 20 steps) and
# check_moe, which runs a layout and compares it with `ref`.
source "$2/tests/lib/dist_common.sh"
# Routing is discrete: a layout's last-bit differences from the reference (its sums run in another
# order) can flip a near-tie between two experts or two tokens competing for capacity, after which
# the curves part by 1e-4. Which seeds meet such a tie depends on the BLAS kernels' rounding, and
# OpenBLAS picks those by CPU (SkylakeX kernels on AVX-512 machines flip dp4ep2_z2 at step 6 of
# moe_zero; Haswell's do not): pinned, so that these tests give the same bits on every x86 CI
# machine with AVX2.
grep -qw avx2 /proc/cpuinfo 2>/dev/null && export OPENBLAS_CORETYPE=Haswell
moe=(--set model.moe.num_experts=4 --set model.moe.top_k=2 --set model.moe.capacity_factor=1.0)
s=(--set model.seq_len=32 --set train.eval_every=10 --set train.eval_batches=2 "${moe[@]}")
fields=(--fields loss,grad_norm,val_loss,moe_aux_loss,moe_dropped_fraction --rtol 1e-5
        --min-steps 20)
run_single ref 8 1 20 "${s[@]}"
# check_moe NAME NPROC MICRO_BATCH GRAD_ACCUM [args]: runs NAME (20 steps) and compares it with
# ref: losses, grad norms, the balance loss and the dropped share within 1e-5 relative
check_moe() { check_layout "$@"; }
# plan_matches_run PLAN_TXT REPORT_JSON: `trainer plan`'s model state per rank (params, grads,
# optimizer) and activations per rank equal the run's report (memory.breakdown), byte for byte
plan_matches_run() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
state = next(l for l in text.splitlines() if l.startswith("model state per rank as this runtime"))
plan = {k: int(v) for k, v in re.findall(r"(params|grads|optimizer) (\d+) B", state)}
plan["activations"] = int(re.search(r"^activations per rank .*: (\d+) B", text, re.M).group(1))
b = json.load(open(sys.argv[2]))["memory"]["breakdown"]
run = {k: b[k] for k in plan}
print(f"plan {plan}, run {run}")
sys.exit(0 if plan == run else 1)
PY
}
