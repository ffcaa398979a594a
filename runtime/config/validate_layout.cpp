// Divisibility of the model and batch by the process grid (DESIGN.md "Process grid").
#include <algorithm>

#include "runtime/config/field_value.h"
#include "runtime/config/validate_internal.h"

namespace trainer::config {
namespace {

// Fails with "config: <a> is not divisible by <b>" unless b divides a.
void require_divisible(long long a, const std::string& a_text, long long b,
                       const std::string& b_text, const std::string& why = "") {
  if (b != 0 && a % b == 0) return;
  fail(a_text + " is not divisible by " + b_text + (why.empty() ? "" : " (" + why + ")"));
}

}  // namespace

int resolved_dp(const ParallelConfig& p, int world_size) {
  const long long model_ranks = 1LL * p.pp * p.cp * p.tp;
  const std::string sizes =
      std::to_string(p.pp) + " * " + std::to_string(p.cp) + " * " + std::to_string(p.tp);
  long long dp = p.dp;
  if (dp == 0) {
    require_divisible(
        world_size, "world size " + std::to_string(world_size), model_ranks,
        "parallel.pp * parallel.cp * parallel.tp = " + sizes + " = " + std::to_string(model_ranks),
        "parallel.dp = auto is world / (pp * cp * tp)");
    dp = world_size / model_ranks;
  }
  if (dp * model_ranks != world_size)
    fail("parallel.dp * parallel.pp * parallel.cp * parallel.tp = " + std::to_string(dp) + " * " +
         sizes + " = " + std::to_string(dp * model_ranks) + " does not match the world size " +
         std::to_string(world_size) + ": start " + std::to_string(dp * model_ranks) +
         " ranks (trainer launch --nproc-per-node, torchrun, srun -n), or set parallel.dp: auto "
         "to derive dp from the world size");
  return static_cast<int>(dp);
}

namespace {

void check_model_split(const RunConfig& c) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  require_divisible(m.d_model, kv("model.d_model", m.d_model), m.n_head,
                    kv("model.n_head", m.n_head));
  require_divisible(m.n_head, kv("model.n_head", m.n_head), p.tp, kv("parallel.tp", p.tp));
  require_divisible(1LL * m.d_model * m.ffn_mult,
                    "the MLP width model.d_model * model.ffn_mult = " +
                        std::to_string(1LL * m.d_model * m.ffn_mult),
                    p.tp, kv("parallel.tp", p.tp));
  require_divisible(m.padded_vocab_size(),
                    "the padded vocabulary (model.vocab_size = " + std::to_string(m.vocab_size) +
                        " rounded up to a multiple of model.make_vocab_size_divisible_by = " +
                        std::to_string(m.make_vocab_size_divisible_by) + ") " +
                        std::to_string(m.padded_vocab_size()),
                    p.tp, kv("parallel.tp", p.tp),
                    "wte's rows and the logits' columns split over the tp ranks: set "
                    "model.make_vocab_size_divisible_by to a multiple of parallel.tp");
  const long long stages = 1LL * p.pp * p.pipeline.virtual_stages;  // (int would overflow)
  require_divisible(m.n_layer, kv("model.n_layer", m.n_layer), stages,
                    "parallel.pp * parallel.pipeline.virtual_stages = " + std::to_string(stages));
}

void check_sequence_split(const RunConfig& c) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  require_divisible(m.seq_len, kv("model.seq_len", m.seq_len), p.cp, kv("parallel.cp", p.cp));
  if (p.cp > 1)
    require_divisible(m.seq_len, kv("model.seq_len", m.seq_len), 2LL * p.cp,
                      "2 * parallel.cp = " + std::to_string(2LL * p.cp),
                      "context parallelism splits the sequence into 2 * cp load-balanced chunks");
  if (p.tp > 1 && p.sequence_parallel)
    require_divisible(
        m.seq_len / p.cp,
        "the per-rank sequence model.seq_len / parallel.cp = " + std::to_string(m.seq_len / p.cp),
        p.tp, kv("parallel.tp", p.tp), "parallel.sequence_parallel splits it over tp");
}

void check_experts(const RunConfig& c) {
  const MoeConfig& moe = c.model.moe;
  const ParallelConfig& p = c.parallel;
  if (moe.num_experts == 0) {
    if (p.ep > 1)
      fail(kv("parallel.ep", p.ep) + " needs experts, but model.moe.num_experts = 0 (dense MLP)");
    return;
  }
  if (moe.top_k > moe.num_experts)
    fail(kv("model.moe.top_k", moe.top_k) + " exceeds " +
         kv("model.moe.num_experts", moe.num_experts));
  require_divisible(moe.num_experts, kv("model.moe.num_experts", moe.num_experts), p.ep,
                    kv("parallel.ep", p.ep));
  require_divisible(1LL * p.dp * p.cp,
                    "parallel.dp * parallel.cp = " + std::to_string(1LL * p.dp * p.cp), p.ep,
                    kv("parallel.ep", p.ep), "expert groups reuse the dp x cp ranks");
}

// What the mixture-of-experts blocks run with (runtime/model/gpt_moe.cpp).
void check_experts_runnable(const RunConfig& c) {
  const ParallelConfig& p = c.parallel;
  const std::string experts = kv("model.moe.num_experts", c.model.moe.num_experts);
  if (p.tp > 1 && !p.sequence_parallel)
    fail(experts + " with " + kv("parallel.tp", p.tp) +
         " needs parallel.sequence_parallel = true (each tp rank routes the tokens of its own "
         "rows to experts it holds whole, as Megatron requires)");
  if (p.tp > 1) {
    // each tp rank routes whole sequences: an expert's capacity counts each sequence's tokens
    const int pieces = p.pp > 1 ? p.pipeline.microbatches : 1;
    const int sequences = c.train.micro_batch / std::max(1, pieces);
    if (sequences % p.tp != 0)
      fail(experts + " with " + kv("parallel.tp", p.tp) + ": the sequences of a forward (" +
           (p.pp > 1 ? "train.micro_batch / parallel.pipeline.microbatches = "
                     : "train.micro_batch = ") +
           std::to_string(sequences) +
           ") must be divisible by parallel.tp (each tp rank routes whole sequences: an "
           "expert's capacity counts a sequence's tokens)");
  }
}

void check_pipeline(const RunConfig& c) {
  const ParallelConfig& p = c.parallel;
  if (p.pipeline.virtual_stages > 1 && p.pipeline.schedule != "interleaved")
    fail(kv("parallel.pipeline.virtual_stages", p.pipeline.virtual_stages) +
         " needs parallel.pipeline.schedule = interleaved, not " + p.pipeline.schedule);
  if (p.pipeline.virtual_stages > 1 && p.pp == 1)
    fail(kv("parallel.pipeline.virtual_stages", p.pipeline.virtual_stages) +
         " needs parallel.pp > 1 (they are model chunks of each pipeline stage)");
  if (p.pp > 1 && p.pipeline.schedule == "interleaved") {
    if (p.pipeline.virtual_stages < 2)
      fail("parallel.pipeline.schedule = interleaved needs " +
           kv("parallel.pipeline.virtual_stages", p.pipeline.virtual_stages) +
           " to be 2 or more (the model chunks of each stage); 1 is the 1f1b schedule");
    require_divisible(p.pipeline.microbatches,
                      kv("parallel.pipeline.microbatches", p.pipeline.microbatches), p.pp,
                      kv("parallel.pp", p.pp),
                      "the interleaved schedule runs the forwards pp micro-batches at a time");
  }
  if (p.pp > 1)
    require_divisible(c.train.micro_batch, kv("train.micro_batch", c.train.micro_batch),
                      p.pipeline.microbatches,
                      kv("parallel.pipeline.microbatches", p.pipeline.microbatches),
                      "with parallel.pp > 1 each micro batch is cut into pipeline microbatches");
}

}  // namespace

void validate_layout(RunConfig& cfg, int world_size) {
  if (world_size < 1) fail("world size " + std::to_string(world_size) + " must be >= 1");
  cfg.parallel.dp = resolved_dp(cfg.parallel, world_size);
  check_model_split(cfg);
  check_sequence_split(cfg);
  check_experts(cfg);
  check_pipeline(cfg);
}

void check_runnable(const RunConfig& cfg) {
  const ParallelConfig& p = cfg.parallel;
  // ZeRO 2 and 3 reduce (and free) each micro-batch's gradients as backward makes them, but a
  // stage's gradients are final only after its last piece, and the tied embedding's only after
  // the sum over the end stages (DeepSpeed refuses the same pairing). Under a schedule a stage's
  // gradients (and, not to gather them once per piece, its weights) would stay whole from its
  // first piece to its last: the peak of ZeRO 1 (torchtitan's FSDP with pp holds the same).
  if (p.pp > 1 && p.zero >= 2)
    fail(kv("parallel.zero", p.zero) + " with " + kv("parallel.pp", p.pp) +
         ": pipeline parallelism runs with zero 0 or 1 (ZeRO 2/3 shard the gradients as each "
         "micro-batch's backward makes them; under a pipeline schedule they stay whole until a "
         "stage's last piece, so zero 1 holds the same peak: use parallel.zero = 1)");
  if (cfg.model.moe.num_experts > 0) check_experts_runnable(cfg);
}

}  // namespace trainer::config
