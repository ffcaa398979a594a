#include "runtime/data/prepare.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/fmt/fmt.h>

#include "runtime/config/run_config.h"
#include "runtime/data/shard_file.h"

namespace fs = std::filesystem;

namespace trainer::data {
namespace {

using config::ConfigError;

std::string shard_path(const std::string& dir, const std::string& split, int64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "%s_%06lld.bin", split.c_str(), static_cast<long long>(index));
  return (fs::path(dir) / name).string();
}

// Collects one split's `total` tokens into as few shards of at most max_tokens as it can, of
// sizes that differ by at most one token, so that no shard is left too small for a global batch.
class ShardSink {
 public:
  ShardSink(std::string dir, std::string split, int64_t total, int64_t max_tokens)
      : dir_(std::move(dir)), split_(std::move(split)) {
    shards_ = std::max<int64_t>(1, (total + max_tokens - 1) / max_tokens);
    base_ = total / shards_;
    longer_ = total % shards_;  // the first `longer_` shards hold base_ + 1 tokens
  }

  void push(uint16_t token) {
    buffer_.push_back(token);
    const auto index = static_cast<int64_t>(written_.size());
    if (static_cast<int64_t>(buffer_.size()) == base_ + (index < longer_ ? 1 : 0)) flush();
  }
  void flush() {
    if (buffer_.empty()) return;
    written_.push_back(shard_path(dir_, split_, static_cast<int64_t>(written_.size())));
    write_shard(written_.back(), buffer_);
    buffer_.clear();
  }
  const std::vector<std::string>& written() const { return written_; }

 private:
  std::string dir_, split_;
  int64_t shards_ = 1, base_ = 0, longer_ = 0;
  std::vector<uint16_t> buffer_;
  std::vector<std::string> written_;
};

void check_options(const PrepareOptions& o) {
  if (o.tokenizer != "byte") {
    throw ConfigError("data prepare: unknown tokenizer '" + o.tokenizer + "': expected byte");
  }
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    char text[32];  // the shortest text that reads back as the value: -0.1, and 1.0000001 not 1
    const auto end = std::to_chars(text, text + sizeof text, o.val_fraction).ptr;
    throw ConfigError("data prepare: --val-fraction " + std::string(text, end) + " outside [0, 1)");
  }
  if (o.inputs.empty()) throw ConfigError("data prepare: no --input files given");
  if (o.output_dir.empty()) throw ConfigError("data prepare: no --output directory given");
  config::check_output_dir("data prepare --output", o.output_dir);
  if (o.max_shard_tokens < 1) throw ConfigError("data prepare: max_shard_tokens must be >= 1");
  for (const auto& input : o.inputs)  // (files: prepare sizes them before it reads them)
    if (const std::string problem = config::input_file_problem(input); !problem.empty())
      throw ConfigError("data prepare: --input " + input + ": " + problem +
                        "; expected a text file");
}

// Token counts of the val split: the last val_fraction, at least 2 tokens when requested.
int64_t val_token_count(int64_t total, double val_fraction) {
  if (val_fraction == 0) return 0;
  return std::max<int64_t>(2, std::llround(static_cast<double>(total) * val_fraction));
}

// Removes train_/val_ shards numbered at or past `kept` (left by an earlier, larger prepare), so a
// glob over the directory sees only this run's shards.
void remove_stale(const std::string& dir, const std::string& split, int64_t kept,
                  std::vector<std::string>& removed) {
  for (int64_t i = kept;; ++i) {
    const std::string path = shard_path(dir, split, i);
    if (!fs::exists(path)) return;
    fs::remove(path);
    removed.push_back(path);
  }
}

}  // namespace

PrepareSummary prepare_data(const PrepareOptions& options) {
  check_options(options);
  PrepareSummary summary;
  for (const auto& input : options.inputs)
    summary.total_tokens += static_cast<int64_t>(fs::file_size(input));
  summary.val_tokens = val_token_count(summary.total_tokens, options.val_fraction);
  summary.train_tokens = summary.total_tokens - summary.val_tokens;
  if (summary.train_tokens < 2) {
    std::ostringstream os;
    os << "data prepare: the inputs hold " << summary.total_tokens << " tokens";
    if (summary.total_tokens == 0) os << " (every input is empty)";
    if (summary.val_tokens > 0 && summary.total_tokens > 0)
      os << "; --val-fraction " << fmt::format("{}", options.val_fraction) << " takes "
         << summary.val_tokens << " of them for val (at least 2), which leaves "
         << std::max<int64_t>(0, summary.train_tokens) << " for train";
    os << "; train needs at least 2";
    throw ConfigError(os.str());
  }

  fs::create_directories(options.output_dir);
  ShardSink train(options.output_dir, "train", summary.train_tokens, options.max_shard_tokens);
  ShardSink val(options.output_dir, "val", summary.val_tokens, options.max_shard_tokens);
  int64_t seen = 0;
  std::vector<char> chunk(1 << 20);
  for (const auto& input : options.inputs) {
    std::ifstream in(input, std::ios::binary);
    while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
      for (std::streamsize i = 0; i < in.gcount(); ++i, ++seen) {
        const auto token =
            static_cast<uint16_t>(static_cast<unsigned char>(chunk[static_cast<size_t>(i)]));
        (seen < summary.train_tokens ? train : val).push(token);
      }
    }
    if (in.bad()) throw std::runtime_error("data prepare: error reading " + input);
  }
  if (seen != summary.total_tokens) {
    throw std::runtime_error("data prepare: inputs changed while reading: expected " +
                             std::to_string(summary.total_tokens) + " bytes, read " +
                             std::to_string(seen));
  }
  train.flush();
  val.flush();
  summary.train_shards = train.written();
  summary.val_shards = val.written();
  remove_stale(options.output_dir, "train", static_cast<int64_t>(summary.train_shards.size()),
               summary.removed_stale);
  remove_stale(options.output_dir, "val", static_cast<int64_t>(summary.val_shards.size()),
               summary.removed_stale);
  return summary;
}

std::string PrepareSummary::describe() const {
  std::ostringstream os;
  os << "prepared " << total_tokens << " tokens (byte tokenizer, vocab " << vocab_size << ")\n"
     << "  train: " << train_tokens << " tokens in " << train_shards.size() << " shard(s)";
  if (!train_shards.empty())
    os << ": " << train_shards.front() << (train_shards.size() > 1 ? " ..." : "");
  os << "\n  val:   " << val_tokens << " tokens in " << val_shards.size() << " shard(s)";
  if (!val_shards.empty())
    os << ": " << val_shards.front() << (val_shards.size() > 1 ? " ..." : "");
  for (const auto& path : removed_stale) os << "\n  removed stale shard " << path;
  return os.str();
}

}  // namespace trainer::data
