#pragma once
// Generated token streams: synthetic:markov (a seeded Markov chain, see markov_chain.h) and
// synthetic:uniform (iid uniform tokens, entropy ln V). Both are infinite, random-access and
// deterministic: the token at a position depends only on (data seed, stream id, position), never
// on how many ranks read the stream or in which order.
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/data/markov_chain.h"
#include "runtime/data/token_source.h"

namespace trainer::data {

// The stream is cut into blocks of kBlockTokens; block b is sampled from an Rng seeded by
// (seed, stream, b), starting from a stationary draw, and cached. So a block's first token is a
// fresh stationary draw rather than a transition (1 position in 65536: it moves the loss floor by
// under 1e-4 nats, and the entropy rate reported is the chain's).
class MarkovSource final : public TokenSource {
 public:
  static constexpr int64_t kBlockTokens = 65536;

  MarkovSource(std::shared_ptr<const MarkovChain> chain, uint64_t seed, uint64_t stream);

  int64_t size() const override { return kInfinite; }
  void read(int64_t pos, int64_t n, int32_t* out) const override;
  std::string name() const override { return "synthetic:markov"; }
  double entropy_rate() const override { return chain_->entropy_rate(); }

  const MarkovChain& chain() const { return *chain_; }

 private:
  const std::vector<int32_t>& block(int64_t b) const;

  struct CachedBlock {
    int64_t index = -1;
    std::vector<int32_t> tokens;
  };
  std::shared_ptr<const MarkovChain> chain_;
  uint64_t seed_;
  uint64_t stream_;
  mutable std::vector<CachedBlock> cache_;  // a few recent blocks, replaced round-robin
  mutable size_t next_victim_ = 0;
};

// Token at position p: a hash of (seed, stream, p) reduced to [0, vocab). No state at all.
class UniformSource final : public TokenSource {
 public:
  UniformSource(int64_t vocab_size, uint64_t seed, uint64_t stream);

  int64_t size() const override { return kInfinite; }
  void read(int64_t pos, int64_t n, int32_t* out) const override;
  std::string name() const override { return "synthetic:uniform"; }
  double entropy_rate() const override;

 private:
  int64_t vocab_;
  uint64_t key_;
};

}  // namespace trainer::data
