#pragma once
// DataLoader: the resumable per-rank loader, with llm.c's DataLoader semantics.
//
// A "sample" is one global batch (one optimizer step): grad_accum * dp_size * B * T + 1
// consecutive tokens of the current shard; micro-batch m of the step has rank r read its B*T + 1
// tokens at sample_start + (m*dp_size + r)*B*T (inputs, and targets shifted by one). Without
// shuffle, sample s of a shard starts at s * grad_accum*dp_size*B*T; a shard holds
// (tokens - 1) / (grad_accum*dp_size*B*T) samples, and after the last one every rank moves to the
// next shard together (after the last shard: shard 0 again, epoch + 1). With grad_accum 1 this is
// llm.c's loader token for token; with more, llm.c switches shards per micro-batch, so the two
// differ only at a shard's end. With shuffle, the shard order is permuted per epoch and the sample
// order per (epoch, shard), with the data seed, identically on every rank, so ranks still read
// disjoint tokens. The tokens of a step depend only on B * grad_accum * dp_size, never on the
// layout: every layout with the same global batch reads the same tokens at every step, across
// shard ends and shuffles, and a loader state saved by one restores on any other. A resume with
// another global batch reads on from the saved token (unshuffled streams only).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config/run_config.h"
#include "runtime/data/token_source.h"

namespace trainer::data {

// Where a loader stands; saved in every checkpoint.
struct LoaderState {
  int64_t shard = 0;   // position in this epoch's shard order
  int64_t offset = 0;  // tokens the dp group has consumed in that shard (micro-batches * dp*B*T)
  int64_t epoch = 0;   // completed passes over all shards
  bool operator==(const LoaderState&) const = default;
};

struct LoaderOptions {
  std::string source = "synthetic:markov";  // synthetic:markov | synthetic:uniform | path | glob
  int64_t micro_batch = 1;                  // B
  int64_t grad_accum = 1;                   // micro-batches per step
  int64_t seq_len = 1;                      // T
  int dp_rank = 0;
  int dp_size = 1;
  int64_t vocab_size = 256;
  uint64_t seed = 7;     // data.seed
  bool shuffle = false;  // ignored for val loaders and for (stationary) synthetic streams
  bool is_val = false;   // val: its own synthetic sampling stream, never shuffled
};

// A position as messages say it, counted from 1: "pass 1, shard 2, token 384".
std::string describe_position(const LoaderState& at);

// The options of a train or val loader for one dp rank, from a run config.
LoaderOptions loader_options(const config::RunConfig& cfg, int dp_rank, int dp_size, bool is_val);

class DataLoader {
 public:
  // Opens the source and enters its first shard. Throws DataError for bad sources, any train
  // shard too small for one global batch (val: all of them), or tokens >= vocab_size in the first
  // shard (every other shard is scanned when first entered).
  explicit DataLoader(LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Fills B*T inputs and B*T targets (the inputs shifted by one token).
  void next_batch(int32_t* inputs, int32_t* targets);

  LoaderState state() const { return state_; }
  // Continues where a loader stood after a whole step, also with another global batch (then the
  // next step reads on from that token; a shuffled stream needs an offset that is a whole number
  // of its global batches). Throws DataError if the state does not fit this data.
  // saved_global_batch_tokens: tokens per step of the run that saved `state` (0: unknown).
  void restore(const LoaderState& state, int64_t saved_global_batch_tokens = 0);
  // Back to the start of the stream (each eval starts at the beginning of the val data).
  void reset() { restore(LoaderState{}); }

  // Entropy rate of a synthetic source in nats/token (the loss floor), NaN for files.
  double entropy_floor() const;
  std::string describe() const;

  int64_t num_shards() const { return static_cast<int64_t>(sources_.size()); }
  // The shards in source order (the one stream of a synthetic source).
  std::vector<const TokenSource*> sources() const {
    std::vector<const TokenSource*> out;
    for (const auto& s : sources_) out.push_back(s.get());
    return out;
  }
  // Global batches in one pass over the data (the largest int64 for a synthetic stream).
  int64_t samples_per_epoch() const;
  // The shards too small for one global batch, which the stream passes over (val data only: a
  // train loader refuses them).
  std::vector<std::string> skipped_shards() const;
  // Passes read so far: the passes completed, plus the share of this pass's global batches the
  // position is past (where it stands in this pass's shard order). NaN for a synthetic stream.
  double passes_read() const;
  // Tokens one rank consumes per micro-batch (B*T), the dp group per micro-batch (dp*B*T) and
  // per step (grad_accum*dp*B*T).
  int64_t tokens_per_rank() const { return options_.micro_batch * options_.seq_len; }
  int64_t tokens_per_group() const { return tokens_per_rank() * options_.dp_size; }
  int64_t tokens_per_sample() const { return tokens_per_group() * options_.grad_accum; }

 private:
  bool shuffled() const;
  void start_epoch(int64_t epoch);
  void enter_shard(int64_t order_index);
  void advance_shard();
  void check_tokens_in_vocab(int64_t source_index);
  const TokenSource& current_source() const;
  int64_t samples_in(const TokenSource& source) const;

  LoaderOptions options_;
  std::vector<std::unique_ptr<TokenSource>> sources_;
  std::vector<bool> vocab_checked_;
  std::vector<int64_t> shard_order_;   // source index for each position of this epoch
  std::vector<int64_t> sample_order_;  // shuffled sample order of the current shard
  int64_t shard_samples_ = 0;          // samples in the current shard
  int64_t samples_before_shard_ = 0;   // this pass's samples in the shards before it
  int64_t samples_per_pass_ = 0;       // samples_per_epoch()
  int64_t micro_in_step_ = 0;          // micro-batches of the current step already read
  LoaderState state_;
  std::vector<int32_t> buffer_;  // B*T + 1 tokens
};

}  // namespace trainer::data
