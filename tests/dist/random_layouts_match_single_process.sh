# scripts/fuzz_layouts.py with a fixed seed: 12 layouts drawn from every axis at once (dp, tp, pp
# 1f1b or interleaved, cp, ep, ZeRO 0-3, sequence parallelism, grad_accum, recompute, bucket
# overlap, fp32 or emulated bf16, dense or MoE), each against the single-process run of the same
# global batch (losses, grad norms and val losses within 1e-4 relative; bf16: losses within 2e-3),
# about half of them stopped at a checkpoint and resumed under a second drawn grid, and `trainer
# plan`'s bytes against the run's. The same script with other seeds and more trials searches wider
# (README, Benchmarks). Most draws must run: a refusal counts, but at most a few.
source "$2/tests/lib/common.sh"
/usr/bin/python3 "$src/scripts/fuzz_layouts.py" --trials 12 --seed 11 --trainer "$bin" \
  --keep "$work/fuzz" >fuzz.log 2>&1 || { cat fuzz.log; fail "a drawn layout differs from one process"; }
cat fuzz.log
passed=$(sed -n 's/^\([0-9]*\) passed, .*/\1/p' fuzz.log)
[ -n "$passed" ] && [ "$passed" -ge 9 ] || fail "only ${passed:-no} of 12 drawn layouts ran"
grep -q "resumed as" fuzz.log || fail "no drawn layout resumed under a second grid"
