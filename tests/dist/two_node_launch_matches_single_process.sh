# Multi-node launch: two `trainer launch --nnodes 2 --node-rank R` (here both on loopback, one
# rank each) form one world of 2 and reproduce the single-process run, as dp 2, as tp 2 and as
# pp 2 (one stage per node, the stages' exchanges between the nodes).
source "$2/tests/lib/dist_common.sh"
run_single ref 4 2 12
port=$(free_port)
pids=()
for node in 0 1; do
  "$bin" launch --nnodes 2 --node-rank $node --master-addr 127.0.0.1 --master-port $port \
    --nproc-per-node 1 "$src/configs/tiny.yaml" "${small[@]}" --set train.steps=12 \
    --set train.micro_batch=4 --out nodes >node$node.log 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p || { cat node*.log; fail "a node's launcher failed"; }; done
compare_metrics ref/metrics.jsonl nodes/metrics.jsonl --rtol 1e-5 --min-steps 12
[ "$(json_get nodes/report.json 'd["parallel"]["world_size"]')" = 2 ] || fail "world is not 2"
# hardware.nodes counts hosts: both "nodes" are this machine (world 2 / 1 local rank would say 2).
[ "$(json_get nodes/report.json 'd["hardware"]["nodes"]')" = 1 ] \
  || fail "hardware.nodes $(json_get nodes/report.json 'd["hardware"]["nodes"]') for one host"
# tp 2 over the two "nodes" (dp 1, the same global batch): the same losses, and a warning that
# the tp groups span nodes.
port=$(free_port)
pids=()
for node in 0 1; do
  "$bin" launch --nnodes 2 --node-rank $node --master-addr 127.0.0.1 --master-port $port \
    --nproc-per-node 1 "$src/configs/tiny.yaml" "${small[@]}" --set train.steps=12 \
    --set train.micro_batch=8 --set parallel.tp=2 --out nodes_tp >node_tp$node.log 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p || { cat node_tp*.log; fail "a tp node's launcher failed"; }; done
compare_metrics ref/metrics.jsonl nodes_tp/metrics.jsonl --rtol 1e-5 --min-steps 12
grep -q "parallel.tp = 2 with 1 rank(s) per node: tp groups span nodes" node_tp0.log \
  || { cat node_tp0.log; fail "no warning that the tp groups span nodes"; }
# pp 2, one stage on each "node" (micro_batch 8 in 4 pieces, 1F1B): the same losses, no warning.
port=$(free_port)
pids=()
for node in 0 1; do
  "$bin" launch --nnodes 2 --node-rank $node --master-addr 127.0.0.1 --master-port $port \
    --nproc-per-node 1 "$src/configs/tiny.yaml" "${small[@]}" --set train.steps=12 \
    --set train.micro_batch=8 --set parallel.pp=2 --set parallel.pipeline.microbatches=4 \
    --out nodes_pp >node_pp$node.log 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p || { cat node_pp*.log; fail "a pp node's launcher failed"; }; done
compare_metrics ref/metrics.jsonl nodes_pp/metrics.jsonl --rtol 1e-5 --min-steps 12
! grep -q "span nodes" node_pp0.log || { cat node_pp0.log; fail "a warning for pp across nodes"; }
