#include "runtime/data/synthetic_source.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"

namespace trainer::data {
namespace {

constexpr uint64_t kMarkovStreamTag = 0x6d61726b6f76;     // "markov"
constexpr uint64_t kUniformStreamTag = 0x756e69666f726d;  // "uniform"
constexpr size_t kCachedBlocks = 4;

}  // namespace

MarkovSource::MarkovSource(std::shared_ptr<const MarkovChain> chain, uint64_t seed, uint64_t stream)
    : chain_(std::move(chain)), seed_(seed), stream_(stream), cache_(kCachedBlocks) {}

const std::vector<int32_t>& MarkovSource::block(int64_t b) const {
  for (const auto& c : cache_)
    if (c.index == b) return c.tokens;
  CachedBlock& slot = cache_[next_victim_];
  next_victim_ = (next_victim_ + 1) % cache_.size();
  Rng rng(derive_seed({seed_, kMarkovStreamTag, stream_, static_cast<uint64_t>(b)}));
  slot.index = b;
  slot.tokens.resize(kBlockTokens);
  slot.tokens[0] = chain_->sample_stationary(rng);
  for (int64_t t = 1; t < kBlockTokens; ++t) {
    slot.tokens[static_cast<size_t>(t)] =
        chain_->sample_next(slot.tokens[static_cast<size_t>(t - 1)], rng);
  }
  return slot.tokens;
}

void MarkovSource::read(int64_t pos, int64_t n, int32_t* out) const {
  TRAINER_CHECK(pos >= 0 && n >= 0, "synthetic:markov read at " << pos << " of " << n);
  while (n > 0) {
    const int64_t b = pos / kBlockTokens, within = pos % kBlockTokens;
    const int64_t take = std::min(n, kBlockTokens - within);
    const auto& tokens = block(b);
    std::copy_n(tokens.begin() + within, take, out);
    pos += take;
    out += take;
    n -= take;
  }
}

UniformSource::UniformSource(int64_t vocab_size, uint64_t seed, uint64_t stream)
    : vocab_(vocab_size), key_(derive_seed({seed, kUniformStreamTag, stream})) {
  TRAINER_CHECK(vocab_ >= 1, "vocab_size " << vocab_);
}

void UniformSource::read(int64_t pos, int64_t n, int32_t* out) const {
  TRAINER_CHECK(pos >= 0 && n >= 0, "synthetic:uniform read at " << pos << " of " << n);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t state = key_ ^ static_cast<uint64_t>(pos + i) * 0xD1B54A32D192ED03ull;
    const uint64_t bits = splitmix64_next(state);
    out[i] = static_cast<int32_t>(Rng::multiply_high(bits, static_cast<uint64_t>(vocab_)));
  }
}

double UniformSource::entropy_rate() const {
  return std::log(static_cast<double>(vocab_));
}

}  // namespace trainer::data
