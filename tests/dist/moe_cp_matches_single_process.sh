# Mixture of experts with context parallelism: each cp rank routes its two chunks of every
# sequence (Megatron's load balance), and the capacity and the balance loss stay the whole
# sequence's: the cp ranks all-gather per chunk how many tokens chose each expert as which choice
# and their probability sums, and each places its own choices in the sequence's priority order.
# Against the single-process run of the same model (4 experts, top 2, capacity factor 1: some
# choices dropped) and global batch (8 sequences of 32 tokens): losses, grad norms, the balance
# loss and the dropped share within 1e-5 relative over 20 steps, at cp 2, cp 4 (8 of a
# sequence's 32 tokens per rank: fewer slots than the capacity of 16), cp 2 with full recompute,
# cp 2 x ep 2, dp 2 x cp 2 with ep 4 at ZeRO 1, and cp 2 x tp 2 with sequence parallelism.
# (cp 2 x ep 2 profiles two steps: the routing's gather is a phase of its own.) `trainer plan`
# predicts a cp 2 x ep 2 rank's model state and activations.
source "$2/tests/lib/moe_common.sh"  # moe, s, ref, check_moe
check_moe cp2 2 8 1 --set parallel.cp=2
check_moe cp4 4 8 1 --set parallel.cp=4
check_moe cp2_full 2 8 1 --set parallel.cp=2 --set activation_checkpointing=full
check_moe cp2ep2 2 8 1 --set parallel.cp=2 --set parallel.ep=2 --set logging.profile_steps=2
check_moe dp2cp2ep4_z1 4 4 1 --set parallel.cp=2 --set parallel.ep=4 --set parallel.zero=1
check_moe cp2tp2 4 8 1 --set parallel.cp=2 --set parallel.tp=2 \
  --set parallel.sequence_parallel=true
[ "$(json_get cp2ep2/report.json 'd["parallel"]["cp"], d["parallel"]["ep"]')" = "2 2" ] \
  || fail "cp 2 x ep 2 report: $(json_get cp2ep2/report.json 'd["parallel"]')"
json_get cp2ep2/report.json '[p["name"] for p in d["profile"]["phases"]]' | grep -q "fwd.cp_all_gather" \
  || fail "cp 2 x ep 2 profile: $(json_get cp2ep2/report.json 'd["profile"]')"

# plan: a cp 2 x ep 2 rank's model state and activations (its slots: the sequence's capacity)
"$bin" plan "$src/configs/tiny.yaml" --gpus 2 "${small[@]}" "${s[@]}" --set parallel.cp=2 \
  --set parallel.ep=2 --set train.micro_batch=8 >plan.txt \
  || { cat plan.txt; fail "plan of cp 2 x ep 2 failed"; }
plan_matches_run plan.txt cp2ep2/report.json || fail "plan's cp 2 x ep 2 rank differs from the run's"
