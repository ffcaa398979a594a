#pragma once
// TokenSource: a random-access stream of tokens (one shard file, or a generated synthetic stream).
// open_token_sources turns a data spec ("synthetic:markov", "synthetic:uniform", a path, a glob)
// into the list of sources a DataLoader walks through, one "shard" each.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace trainer::data {

class TokenSource {
 public:
  static constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max();

  virtual ~TokenSource() = default;
  // Number of tokens, or kInfinite for generated streams.
  virtual int64_t size() const = 0;
  // Copies tokens [pos, pos + n) into out; the range must lie inside the source. Not thread-safe
  // (synthetic sources cache generated blocks).
  virtual void read(int64_t pos, int64_t n, int32_t* out) const = 0;
  // A file path, or the synthetic spec.
  virtual std::string name() const = 0;
  // Exact entropy rate in nats/token where it is known (synthetic sources), NaN otherwise.
  virtual double entropy_rate() const { return std::numeric_limits<double>::quiet_NaN(); }
};

struct SourceOptions {
  int64_t vocab_size = 256;  // synthetic sources generate tokens in [0, vocab_size)
  uint64_t seed = 7;         // data.seed: the Markov chain and the sampling streams
  uint64_t stream = 0;       // sampling stream of synthetic sources (train 0, val 1)
};

// True for "synthetic:..." specs.
bool is_synthetic_spec(const std::string& spec);

// Opens the sources a spec names: one synthetic stream, one shard file, or every file a glob
// matches (sorted by name). Throws DataError for an unknown synthetic kind, a glob without
// matches, or a file that is missing or not a valid shard.
std::vector<std::unique_ptr<TokenSource>> open_token_sources(const std::string& spec,
                                                             const SourceOptions& options);

}  // namespace trainer::data
