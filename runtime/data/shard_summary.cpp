#include "runtime/data/shard_summary.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "runtime/core/sha256.h"
#include "runtime/data/token_source.h"

namespace trainer::data {
namespace {

std::string described(const ShardSummary& s) {
  return s.name + " (" + std::to_string(s.tokens) + " tokens)";
}

}  // namespace

std::string shard_list_text(const std::vector<ShardSummary>& shards) {
  std::string text;
  for (const ShardSummary& s : shards) text += std::to_string(s.tokens) + " " + s.name + "\n";
  return text;
}

std::vector<ShardSummary> shard_list_from_text(const std::string& text) {
  std::vector<ShardSummary> shards;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.find(' ');
    shards.push_back({line.substr(space + 1), std::stoll(line.substr(0, space))});
  }
  return shards;
}

std::string first_shard_difference(const std::vector<ShardSummary>& mine,
                                   const std::string& mine_name,
                                   const std::vector<ShardSummary>& theirs,
                                   const std::string& theirs_name) {
  for (size_t i = 0; i < std::max(mine.size(), theirs.size()); ++i) {
    const auto at = [&](const std::vector<ShardSummary>& list) {
      return i < list.size() ? described(list[i]) : std::string("none");
    };
    if (i >= mine.size() || i >= theirs.size() || mine[i] != theirs[i])
      return "shard " + std::to_string(i + 1) + " is " + at(mine) + " " + mine_name + ", " +
             at(theirs) + " " + theirs_name;
  }
  return "";
}

std::vector<ShardSummary> shard_summaries(const DataLoader& loader) {
  std::vector<ShardSummary> out;
  for (const TokenSource* source : loader.sources()) {
    if (source->size() == TokenSource::kInfinite) return {};
    out.push_back({std::filesystem::path(source->name()).filename().string(), source->size()});
  }
  return out;
}

std::optional<std::string> shards_fingerprint(const DataLoader& loader) {
  std::string text;
  std::vector<int32_t> tokens;
  for (const TokenSource* source : loader.sources()) {
    if (source->size() == TokenSource::kInfinite) return std::nullopt;
    const int64_t n = std::min<int64_t>(256, source->size());
    tokens.resize(static_cast<size_t>(2 * n));
    source->read(0, n, tokens.data());
    source->read(source->size() - n, n, tokens.data() + n);
    text += std::filesystem::path(source->name()).filename().string() + " " +
            std::to_string(source->size()) + "\n";
    text.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(int32_t));
  }
  if (text.empty()) return std::nullopt;
  return sha256_hex(text);
}

std::string shard_list_difference(const std::vector<ShardSummary>& saved,
                                  const std::vector<ShardSummary>& now, const LoaderState& at,
                                  bool shuffled, std::optional<bool> shuffled_then,
                                  std::optional<bool> synthetic_then) {
  const std::string counts =
      std::to_string(now.size()) + " shard(s) now, " + std::to_string(saved.size()) + " then";
  if (now.empty())  // a synthetic stream now: any position of it is as good
    return saved.empty()
               ? ""
               : "a synthetic stream now, " + std::to_string(saved.size()) + " shard(s) then";
  if (synthetic_then.value_or(false))
    return std::to_string(now.size()) + " shard(s) now, a synthetic stream then";
  const auto text = [](bool on) { return std::string(on ? "true" : "false"); };
  if (shuffled_then && *shuffled_then != shuffled)
    return "data.shuffle " + text(shuffled) + " now, " + text(*shuffled_then) +
           " then (a shuffled position is a sample of a permutation, an unshuffled one a token "
           "offset)";
  if (saved.empty()) return "";
  if (shuffled && now.size() != saved.size())
    return counts + " (data.shuffle orders each pass over all of them)";
  const size_t must_match =
      shuffled ? saved.size() : std::min(saved.size(), static_cast<size_t>(at.shard) + 1);
  if (now.size() < must_match) return counts;
  const auto first = [&](const std::vector<ShardSummary>& list) {
    return std::vector<ShardSummary>(list.begin(), list.begin() + static_cast<long>(must_match));
  };
  return first_shard_difference(first(now), "now", first(saved), "then");
}

}  // namespace trainer::data
