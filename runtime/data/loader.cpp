#include "runtime/data/loader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "runtime/core/check.h"
#include "runtime/data/data_error.h"
#include "runtime/data/rng.h"

namespace trainer::data {
namespace {

constexpr uint64_t kShardOrderTag = 0x7368617264;     // "shard"
constexpr uint64_t kSampleOrderTag = 0x73616d706c65;  // "sample"
constexpr int64_t kVocabCheckChunk = 1 << 20;

void check_options(const LoaderOptions& o) {
  auto bad = [&](const std::string& what) {
    throw DataError("data loader for '" + o.source + "': " + what);
  };
  if (o.micro_batch < 1) bad("micro_batch " + std::to_string(o.micro_batch) + " must be >= 1");
  if (o.grad_accum < 1) bad("grad_accum " + std::to_string(o.grad_accum) + " must be >= 1");
  if (o.seq_len < 1) bad("seq_len " + std::to_string(o.seq_len) + " must be >= 1");
  if (o.dp_size < 1 || o.dp_rank < 0 || o.dp_rank >= o.dp_size) {
    bad("dp rank " + std::to_string(o.dp_rank) + " of " + std::to_string(o.dp_size) +
        " is not a valid rank");
  }
}

// Bad data named as bad input: "config: data.train = "<spec>": <what>".
DataError keyed(const LoaderOptions& o, std::string what) {
  if (what.starts_with("data: ")) what.erase(0, 6);
  return DataError("config: " + std::string(o.is_val ? "data.val" : "data.train") + " = \"" +
                   o.source + "\": " + what);
}

}  // namespace

DataLoader::DataLoader(LoaderOptions options) : options_(std::move(options)) {
  check_options(options_);
  try {
    sources_ = open_token_sources(
        options_.source, SourceOptions{.vocab_size = options_.vocab_size,
                                       .seed = options_.seed,
                                       .stream = options_.is_val ? uint64_t{1} : uint64_t{0}});
  } catch (const DataError& e) {
    throw keyed(options_, e.what());
  }
  // Every shard's size is known from its header: a train shard too small for one global batch
  // is bad input now, not when the run first reaches it. Val data needs one global batch in all;
  // evals skip val shards smaller than that.
  for (const auto& source : sources_) {
    if (samples_in(*source) < 1 && (!options_.is_val || samples_per_epoch() < 1)) {
      throw keyed(options_,
                  "shard " + source->name() + " has " + std::to_string(source->size()) +
                      " tokens, fewer than one global batch: micro_batch " +
                      std::to_string(options_.micro_batch) + " x grad_accum " +
                      std::to_string(options_.grad_accum) + " x dp " +
                      std::to_string(options_.dp_size) + " x seq_len " +
                      std::to_string(options_.seq_len) +
                      " + 1 = " + std::to_string(tokens_per_sample() + 1) + " tokens" +
                      (options_.is_val ? " (train.eval_every: 0 trains without evals)" : ""));
    }
  }
  samples_per_pass_ = samples_per_epoch();
  vocab_checked_.assign(sources_.size(), false);
  buffer_.resize(static_cast<size_t>(tokens_per_rank() + 1));
  reset();
}

DataLoader::~DataLoader() = default;

bool DataLoader::shuffled() const {
  return options_.shuffle && !options_.is_val && sources_.front()->size() != TokenSource::kInfinite;
}

void DataLoader::start_epoch(int64_t epoch) {
  state_.epoch = epoch;
  const auto n = static_cast<int64_t>(sources_.size());
  if (shuffled()) {
    Rng rng(derive_seed({options_.seed, kShardOrderTag, static_cast<uint64_t>(epoch)}));
    shard_order_ = random_permutation(n, rng);
  } else {
    shard_order_.resize(static_cast<size_t>(n));
    std::iota(shard_order_.begin(), shard_order_.end(), int64_t{0});
  }
}

void DataLoader::enter_shard(int64_t order_index) {
  state_.shard = order_index;
  state_.offset = 0;
  const int64_t index = shard_order_[static_cast<size_t>(order_index)];
  const TokenSource& source = *sources_[static_cast<size_t>(index)];
  check_tokens_in_vocab(index);
  shard_samples_ = samples_in(source);
  samples_before_shard_ = 0;  // (once a shard: passes_read runs every step)
  if (source.size() != TokenSource::kInfinite)
    for (int64_t p = 0; p < order_index; ++p)
      samples_before_shard_ +=
          samples_in(*sources_[static_cast<size_t>(shard_order_[static_cast<size_t>(p)])]);
  sample_order_.clear();
  if (shuffled()) {
    Rng rng(derive_seed({options_.seed, kSampleOrderTag, static_cast<uint64_t>(state_.epoch),
                         static_cast<uint64_t>(index)}));
    sample_order_ = random_permutation(shard_samples_, rng);
  }
}

int64_t DataLoader::samples_in(const TokenSource& source) const {
  if (source.size() == TokenSource::kInfinite)
    return std::numeric_limits<int64_t>::max() / tokens_per_sample() - 1;
  return (source.size() - 1) / tokens_per_sample();
}

int64_t DataLoader::samples_per_epoch() const {
  int64_t samples = 0;
  for (const auto& source : sources_) {
    if (source->size() == TokenSource::kInfinite) return std::numeric_limits<int64_t>::max();
    samples += samples_in(*source);
  }
  return samples;
}

std::vector<std::string> DataLoader::skipped_shards() const {
  std::vector<std::string> skipped;
  for (const auto& source : sources_)
    if (samples_in(*source) < 1) skipped.push_back(source->name());
  return skipped;
}

double DataLoader::passes_read() const {
  if (samples_per_pass_ == std::numeric_limits<int64_t>::max() || samples_per_pass_ < 1)
    return std::numeric_limits<double>::quiet_NaN();
  const double in_shard = double(state_.offset) / double(tokens_per_sample());
  return double(state_.epoch) +
         (double(samples_before_shard_) + in_shard) / double(samples_per_pass_);
}

void DataLoader::advance_shard() {
  if (state_.shard + 1 >= num_shards()) {
    start_epoch(state_.epoch + 1);
    enter_shard(0);
  } else {
    enter_shard(state_.shard + 1);
  }
}

// Each file is scanned once per loader, when the loader first enters it (as llm.c loads a shard).
void DataLoader::check_tokens_in_vocab(int64_t source_index) {
  const auto i = static_cast<size_t>(source_index);
  if (vocab_checked_[i]) return;
  const TokenSource& source = *sources_[i];
  if (source.size() != TokenSource::kInfinite) {  // generated streams are in range by construction
    std::vector<int32_t> chunk;
    for (int64_t pos = 0; pos < source.size(); pos += kVocabCheckChunk) {
      const int64_t n = std::min(kVocabCheckChunk, source.size() - pos);
      chunk.resize(static_cast<size_t>(n));
      source.read(pos, n, chunk.data());
      const auto bad = std::find_if(chunk.begin(), chunk.end(),
                                    [&](int32_t t) { return t >= options_.vocab_size; });
      if (bad != chunk.end()) {
        throw keyed(options_, "shard " + source.name() + " has token " + std::to_string(*bad) +
                                  " at position " + std::to_string(pos + (bad - chunk.begin())) +
                                  ", expected tokens below model.vocab_size " +
                                  std::to_string(options_.vocab_size) +
                                  " (a shard's tokens are checked when the run first reads it)");
      }
    }
  }
  vocab_checked_[i] = true;
}

void DataLoader::next_batch(int32_t* inputs, int32_t* targets) {
  const TokenSource* source = &current_source();
  // Shards switch between steps, never inside one: when the next global batch does not fit.
  // (A loop: val data may have shards too small for a step; some shard holds one.)
  auto step_fits = [&] {
    return shuffled() ? state_.offset / tokens_per_sample() < shard_samples_
                      : source->size() == TokenSource::kInfinite ||
                            state_.offset + tokens_per_sample() + 1 <= source->size();
  };
  while (micro_in_step_ == 0 && !step_fits()) {
    advance_shard();
    source = &current_source();
  }
  // Unshuffled, a step reads on from wherever the last one stopped (any offset: a resume may
  // change the global batch); shuffled, it reads the sample the permutation picks.
  int64_t pos = state_.offset;
  if (shuffled()) {
    const int64_t sample = state_.offset / tokens_per_sample();
    pos = sample_order_[static_cast<size_t>(sample)] * tokens_per_sample() +
          micro_in_step_ * tokens_per_group();
  }
  source->read(pos + options_.dp_rank * tokens_per_rank(), tokens_per_rank() + 1, buffer_.data());
  std::copy_n(buffer_.begin(), tokens_per_rank(), inputs);
  std::copy_n(buffer_.begin() + 1, tokens_per_rank(), targets);
  state_.offset += tokens_per_group();
  micro_in_step_ = (micro_in_step_ + 1) % options_.grad_accum;
}

const TokenSource& DataLoader::current_source() const {
  return *sources_[static_cast<size_t>(shard_order_[static_cast<size_t>(state_.shard)])];
}

void DataLoader::restore(const LoaderState& state, int64_t saved_global_batch_tokens) {
  auto bad = [&](const std::string& what) {
    throw keyed(options_, "cannot continue from the checkpoint's position (" +
                              describe_position(state) + "): " + what);
  };
  if (state.epoch < 0) bad("negative epoch");
  if (state.shard < 0 || state.shard >= num_shards()) {
    bad("expected a shard in [0, " + std::to_string(num_shards()) + ")");
  }
  if (state.offset < 0) bad("negative offset");
  // A shuffled stream's position is a sample of its permutation: it continues only with the
  // global batch it was saved with (or one that divides the offset).
  if (shuffled() && saved_global_batch_tokens > 0 &&
      saved_global_batch_tokens != tokens_per_sample()) {
    bad("a shuffled stream resumes only with the global batch it was saved with (its samples "
        "are a permutation of whole global batches): saved with " +
        std::to_string(saved_global_batch_tokens) + " tokens per step, this run has " +
        std::to_string(tokens_per_sample()) +
        "; keep micro_batch*grad_accum*dp, or use data.shuffle: false");
  }
  if (shuffled() && state.offset % tokens_per_sample() != 0) {
    bad("a shuffled stream resumes at a whole number of global batches of "
        "micro_batch*grad_accum*dp*seq_len = " +
        std::to_string(tokens_per_sample()) +
        " tokens; keep the global batch it was saved with, or data.shuffle: false");
  }
  start_epoch(state.epoch);
  enter_shard(state.shard);
  const TokenSource& source = current_source();
  if (source.size() != TokenSource::kInfinite && state.offset > source.size()) {
    bad("the shard holds only " + std::to_string(source.size()) + " tokens");
  }
  state_.offset = state.offset;
  micro_in_step_ = 0;
}

double DataLoader::entropy_floor() const {
  if (!is_synthetic_spec(options_.source)) return std::numeric_limits<double>::quiet_NaN();
  return sources_.front()->entropy_rate();
}

std::string DataLoader::describe() const {
  std::ostringstream os;
  os << (options_.is_val ? "val" : "train") << " data " << options_.source;
  if (is_synthetic_spec(options_.source)) {
    os << " (vocab " << options_.vocab_size << ", seed " << options_.seed << ", entropy rate "
       << entropy_floor() << " nats/token)";
  } else {
    int64_t tokens = 0;
    for (const auto& s : sources_) tokens += s->size();
    os << " (" << num_shards() << " shard" << (num_shards() == 1 ? "" : "s") << ", " << tokens
       << " tokens" << (shuffled() ? ", shuffled with seed " + std::to_string(options_.seed) : "")
       << ")";
  }
  os << ", rank " << options_.dp_rank << "/" << options_.dp_size << ", B=" << options_.micro_batch
     << " T=" << options_.seq_len << " grad_accum=" << options_.grad_accum;
  return os.str();
}

std::string describe_position(const LoaderState& at) {
  return "pass " + std::to_string(at.epoch + 1) + ", shard " + std::to_string(at.shard + 1) +
         ", token " + std::to_string(at.offset);
}

LoaderOptions loader_options(const config::RunConfig& cfg, int dp_rank, int dp_size, bool is_val) {
  return LoaderOptions{.source = is_val ? cfg.data.val : cfg.data.train,
                       .micro_batch = cfg.train.micro_batch,
                       .grad_accum = cfg.train.grad_accum,
                       .seq_len = cfg.model.seq_len,
                       .dp_rank = dp_rank,
                       .dp_size = dp_size,
                       .vocab_size = cfg.model.vocab_size,
                       .seed = cfg.data.seed,
                       .shuffle = cfg.data.shuffle,
                       .is_val = is_val};
}

}  // namespace trainer::data
