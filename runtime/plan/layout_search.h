#pragma once
// `trainer plan --search`: the layouts that train the config's global batch on a number of
// devices, with the memory each needs per rank, whether it fits, and what it costs, best first.
//
// The knobs searched are the ones that change memory and speed but not the numbers: tp (each
// that divides the devices, the heads, the MLP width and the padded vocabulary;
// SearchRequest::devices) with and without
// sequence parallelism, dp the devices over tp, ZeRO stage, micro_batch (with grad_accum making
// up the sequences per dp rank, so the global batch and the tokens stay as configured) and
// activation checkpointing; and pp (each that divides the layers and the devices over tp),
// where a stage's micro-batch is all of its dp rank's sequences (grad_accum 1: one
// schedule per step, the smallest bubble) cut into pieces of each size that divides them, at
// ZeRO 0 and 1. Precision (it changes the losses), cp and ep stay as configured: dp is the
// devices over tp x pp x cp, and ZeRO shards (and the gradients reduce) over dp x cp. Each rank
// holds its tp slice of its stage.
//
// Memory per rank is what this runtime allocates: model state as parallel::predict_held_state
// says for the backend (the cuda backend's 2 MiB pages keep a page at each end of a released
// range), ZeRO's communication staging (parallel/zero_layout.h, from which ZeroOptimizer sizes it),
// and the activations of one micro-batch exactly as model::Activations allocates them. A layout
// fits when that total is within `usable_fraction` of the device's memory; the rest is left for
// what the estimate leaves out (the CUDA context, NCCL's and cuBLASLt's buffers, Gloo's copies).
//
// Ranking, among the layouts that fit, in this order (each a tie-break of the one before):
//   1. fewer FLOPs per token (recompute adds forward work: report::recompute_flops_per_token)
//      over the share of the time the pipeline is busy (1 - bubble; 1 at pp 1);
//   1b. a smaller tp (its collectives sit inside every layer's forward and backward, Megatron's
//      advice: tensor parallelism only as far as memory needs it), then a smaller pp;
//   2. less dp traffic per step (parallel::zero_traffic_bytes: ZeRO 2 reduce-scatters every
//      micro-batch, ZeRO 3 also gathers the params for each micro-batch's forward and backward);
//   3. a larger micro_batch (larger GEMMs, fewer launches and optimizer-free micro-steps);
//   4. a lower ZeRO stage (fewer collectives, simpler state);
//   5. sequence parallelism on (less memory, the same bytes moved).
// This is a rule a user can check by hand, not a timing model: no step time is predicted.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/model/param_layout.h"
#include "runtime/parallel/zero_memory.h"

namespace trainer::plan {

// What one rank of pipeline stage `stage` holds: tp rank 0's slice (every tp rank's is the same
// size), ep rank 0's experts (every ep rank holds as many).
model::ParamLayout rank_layout(const config::RunConfig& cfg, int stage = 0);

// The fewest parameters a rank of any stage holds. The gradient reduction cuts a rank's
// parameters over the dp x cp replicas (parallel::ZeroShards), so there can be no more replicas.
int64_t smallest_rank_numel(const config::RunConfig& cfg);

// Bytes a rank of `layout` sends per step over its gradient groups (ring collectives): ZeRO's
// (parallel::zero_traffic_bytes) over the dp replicas, or under expert parallelism the experts'
// all-reduce (ZeRO 0) or ZeRO's collectives (over ZeroUnits' segments) over their dp / ep
// replicas beside the rest's over dp. 0 at dp 1.
double dp_traffic_bytes(const config::RunConfig& cfg, const model::ParamLayout& layout, int zero,
                        int dp, int grad_accum);

// The device kinds of `trainer plan --gpu`.
struct DeviceKind {
  std::string name;         // h100 | h200 | a100 | cpu
  double memory_bytes = 0;  // per device (cpu: this machine's memory over the ranks)
  bool cuda = false;        // the cuda backend (2 MiB pages; flash attention)
  // whether ZeRO's released ranges leave memory: the cpu backend's always; the cuda backend's
  // unless TRAINER_CUDA_UNMAP=0 (read from this process's environment)
  bool releases_pages = true;
};

// h100 and h200 and a100 by the memory nvidia-smi reports for their SXM parts (81559, 143771 and
// 81920 MiB); cpu: this machine's physical memory divided by `ranks`. memory_gib > 0 overrides.
DeviceKind device_kind(const std::string& name, int ranks, double memory_gib = 0);

struct SearchRequest {
  config::RunConfig cfg;  // validated; micro_batch x grad_accum x dp is the global batch
  int dp = 1;             // the config's, on its tp
  DeviceKind device;
  double usable_fraction = 0.9;
  bool flash_attention = false;  // attention keeps row statistics, not probabilities (cuda)
  // The devices: every tp that divides them, the heads and the MLP width (and the global batch's
  // dp share; on GPUs at most 8, a node's NVLink domain) is tried, at dp = devices / tp, with
  // and without sequence parallelism. 0: the config's tp only, at `dp`.
  int devices = 0;
};

// Model state and ZeRO staging per rank, in bytes.
struct HeldState {
  parallel::ZeroPrediction state;
  double zero_staging = 0;
  double total() const { return state.total() + zero_staging; }
};

struct Layout {
  int tp = 1, dp = 1;
  int pp = 1;         // pipeline stages; the numbers per rank are the heaviest stage's
  int pieces = 1;     // pp > 1: parallel.pipeline.microbatches (the micro-batch is one schedule)
  double bubble = 0;  // pp > 1: the schedule's idle share, (pp - 1) / (pieces + pp - 1)
  bool sequence_parallel = false;
  int zero = 0;
  int micro_batch = 1;
  int grad_accum = 1;
  std::string activation_checkpointing;  // none | selective | full
  HeldState held;                        // bytes per rank
  double activations = 0;                // bytes per rank
  double total() const { return held.total() + activations; }
  bool fits = false;
  double flops_ratio = 1;       // FLOPs per token over the formula's (1 without recompute)
  double dp_traffic_bytes = 0;  // sent per rank per step (ring collectives)
  bool is_config = false;       // the layout the config asks for
};

// Every layout, ranked: those that fit first, in the order above; then those that do not, the
// smallest first.
std::vector<Layout> search_layouts(const SearchRequest& request);

// The activation bytes of one micro-batch of `micro_batch` sequences for this config under
// `activation_checkpointing` (model::Activations::bytes_needed with the config's dtypes), on a
// rank of pipeline stage `stage`: under pipeline parallelism the pieces the schedule keeps in
// flight there (1F1B: pp - stage of them; GPipe: all).
size_t activation_bytes(const config::RunConfig& cfg, int micro_batch,
                        const std::string& activation_checkpointing, bool flash_attention,
                        int stage = 0);

// The pipeline stage whose ranks need the most memory (model state and activations): the first
// (the embeddings, the most pieces in flight) or the last (the head's copy of wte, the logits).
int heaviest_stage(const config::RunConfig& cfg, int zero, int dp, const DeviceKind& device,
                   bool flash_attention);

// Pipeline parallelism's point-to-point bytes per step sent by the rank that sends the most (0 at
// pp 1): each micro-batch's boundary activations forward and their gradients back, fp32
// [micro_batch, seq_len, d_model] each (under sequence parallelism the rank's 1/tp of the rows),
// from each of the stage's chunks (the interleaved schedule's), but the model's last chunk sends
// nothing forward and its first nothing back: a middle stage (pp > 2) sends both ways from every
// chunk, at pp 2 each stage one transfer fewer.
double pp_sent_bytes(const config::RunConfig& cfg);

// Tensor parallelism's activation collectives per training step (none at tp 1), on one
// micro-batch's [micro_batch, seq_len, d_model] each: every block sums its two row-parallel
// outputs in forward and its two column-parallel input gradients in backward, and full activation
// recompute reruns the forward's. Without sequence parallelism those are fp32 all-reduces (a ring
// sends 2 (tp - 1) / tp of each per rank); with it, each is a reduce-scatter (fp32), and each
// layernorm's output (in forward and again in backward) and each projection's backward input is
// all-gathered (in the matmul dtype; a ring sends (tp - 1) / tp of the whole tensor per rank).
// The vocabulary-parallel ends, per micro-batch: the embedding's output is all-reduced (under
// sequence parallelism reduce-scattered, and its gradient gathered), the head's input gradient
// all-reduced (or the final norm's output gathered and that gradient reduce-scattered), and the
// cross-entropy's statistics (3 floats per row) gathered. Under pipeline parallelism a rank counts
// its stage's n_layer / pp blocks and the one end that sends more. Not counted: sequence
// parallelism's all-reduces of the layernorms' gradients, once per step (2 per block and one for
// the final norm, of 2 C floats each).
struct TpTraffic {
  int64_t collectives = 0;  // per step, per rank
  double sent_bytes = 0;    // per rank per step, by ring algorithms
};
TpTraffic tp_traffic(const config::RunConfig& cfg);

// Context parallelism's collectives per rank per step: each block's qkv all-gathered in forward
// (and in a recompute) and again in backward, and its gradient reduce-scattered in fp32.
struct CpTraffic {
  int64_t collectives = 0;
  double sent_bytes = 0;  // by ring algorithms
};
CpTraffic cp_traffic(const config::RunConfig& cfg);

// Expert parallelism's all-to-alls per rank per step: in each mixture-of-experts block, the
// tokens' rows to their experts (matmul dtype) and the experts' outputs back (fp32) in forward
// (and in a full recompute), the outputs' gradient (matmul dtype) and the inputs' (fp32) in
// backward. Only the kept choices' rows travel (pack_expert_slots), not the slots' capacity:
// B * T * top_k rows of d_model each (B: the sequences the rank routes, micro_batch / tp; T: its
// tokens of each sequence) when the router balances the experts, as the balance loss drives it
// to, and no choice is dropped; at most E * B * GptDims::expert_slots (both:
// GptDims::expert_block_rows at ep 1). (ep - 1) / ep of them leave the rank. (Not counted: each
// block's exchange of the E kept counts.)
struct EpTraffic {
  int64_t collectives = 0;
  double sent_bytes = 0;
};
EpTraffic ep_traffic(const config::RunConfig& cfg);

// Model state and ZeRO staging per rank as this runtime holds them on `device`
// (parallel::predict_held_state, parallel::zero_staging_floats; under expert parallelism ZeRO's
// shards of each segment, parallel::zero_segments). At dp 1 every stage trains as stage 0
// (parallel::zero_shards_state).
HeldState held_state_bytes(const config::RunConfig& cfg, int zero, int dp, const DeviceKind& device,
                           int stage = 0);

}  // namespace trainer::plan
