#include "runtime/data/shard_summary.h"

#include <algorithm>
#include <filesystem>

#include "runtime/data/token_source.h"

namespace trainer::data {
namespace {

std::string described(const ShardSummary& s) {
  return s.name + " (" + std::to_string(s.tokens) + " tokens)";
}

}  // namespace

std::vector<ShardSummary> shard_summaries(const DataLoader& loader) {
  std::vector<ShardSummary> out;
  for (const TokenSource* source : loader.sources()) {
    if (source->size() == TokenSource::kInfinite) return {};
    out.push_back({std::filesystem::path(source->name()).filename().string(), source->size()});
  }
  return out;
}

std::string shard_list_difference(const std::vector<ShardSummary>& saved,
                                  const std::vector<ShardSummary>& now, const LoaderState& at,
                                  bool shuffled, std::optional<bool> shuffled_then) {
  if (saved.empty()) return "";
  const auto text = [](bool on) { return std::string(on ? "true" : "false"); };
  if (shuffled_then && *shuffled_then != shuffled)
    return "data.shuffle " + text(shuffled) + " now, " + text(*shuffled_then) +
           " then (a shuffled position is a sample of a permutation, an unshuffled one a token "
           "offset)";
  const std::string counts =
      std::to_string(now.size()) + " shard(s) now, " + std::to_string(saved.size()) + " then";
  if (now.empty())
    return "a synthetic stream now, " + std::to_string(saved.size()) + " shard(s) then";
  if (shuffled && now.size() != saved.size())
    return counts + " (data.shuffle orders each pass over all of them)";
  const size_t must_match =
      shuffled ? saved.size() : std::min(saved.size(), static_cast<size_t>(at.shard) + 1);
  for (size_t i = 0; i < must_match; ++i) {
    if (i >= now.size()) return counts;
    if (now[i] != saved[i])
      return "shard " + std::to_string(i + 1) + " is " + described(now[i]) + " now, " +
             described(saved[i]) + " then";
  }
  return "";
}

}  // namespace trainer::data
