#include "runtime/data/token_source.h"

#include <memory>

#include "runtime/config/data_paths.h"
#include "runtime/data/data_error.h"
#include "runtime/data/markov_chain.h"
#include "runtime/data/shard_file.h"
#include "runtime/data/synthetic_source.h"

namespace trainer::data {
namespace {

constexpr const char* kSyntheticPrefix = "synthetic:";

std::unique_ptr<TokenSource> open_synthetic(const std::string& spec, const SourceOptions& opt) {
  const std::string kind = spec.substr(std::string(kSyntheticPrefix).size());
  if (kind == "markov") {
    auto chain = std::make_shared<const MarkovChain>(
        MarkovParams{.vocab_size = opt.vocab_size, .seed = opt.seed});
    return std::make_unique<MarkovSource>(std::move(chain), opt.seed, opt.stream);
  }
  if (kind == "uniform")
    return std::make_unique<UniformSource>(opt.vocab_size, opt.seed, opt.stream);
  throw DataError("data: unknown synthetic source '" + spec +
                  "': expected synthetic:markov or synthetic:uniform");
}

}  // namespace

bool is_synthetic_spec(const std::string& spec) {
  return spec.rfind(kSyntheticPrefix, 0) == 0;
}

std::vector<std::unique_ptr<TokenSource>> open_token_sources(const std::string& spec,
                                                             const SourceOptions& options) {
  if (options.vocab_size < 1 || options.vocab_size > 65536) {
    throw DataError("data: vocab_size " + std::to_string(options.vocab_size) +
                    " outside [1, 65536] (shards hold uint16 tokens)");
  }
  std::vector<std::unique_ptr<TokenSource>> sources;
  if (spec.empty())
    throw DataError("data: empty data source: expected synthetic:markov, a path or a glob");
  if (is_synthetic_spec(spec)) {
    sources.push_back(open_synthetic(spec, options));
    return sources;
  }
  const std::vector<std::string> paths = config::data_paths(spec);
  if (paths.empty()) throw DataError("data: no files match '" + spec + "'");
  for (const auto& path : paths) sources.push_back(std::make_unique<ShardReader>(path));
  return sources;
}

}  // namespace trainer::data
