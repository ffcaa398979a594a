// RunConfig -> canonical YAML (every key, table order, one key per line) and its sha256.
#include <algorithm>
#include <sstream>

#include "runtime/config/field_value.h"
#include "runtime/config/run_config.h"
#include "runtime/config/schema.h"
#include "runtime/core/sha256.h"

namespace trainer::config {
namespace {

std::vector<std::string> split_path(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream in(key);
  for (std::string part; std::getline(in, part, '.');) parts.push_back(part);
  return parts;
}

}  // namespace

std::string to_yaml(const RunConfig& cfg) {
  std::ostringstream out;
  out << "# trainer run config (canonical form; its sha256 is the config hash)\n";
  std::vector<std::string> open;  // sections of the previous key
  for (const Field& f : config_fields()) {
    std::vector<std::string> parts = split_path(f.key);
    const std::string name = parts.back();
    parts.pop_back();
    size_t shared = 0;
    while (shared < open.size() && shared < parts.size() && open[shared] == parts[shared]) ++shared;
    // Open the sections this key adds below the shared prefix.
    for (size_t depth = shared; depth < parts.size(); ++depth)
      out << std::string(2 * depth, ' ') << parts[depth] << ":\n";
    out << std::string(2 * parts.size(), ' ') << name << ": " << field_text(cfg, f) << "\n";
    open = parts;
  }
  return out.str();
}

std::vector<std::string> config_changes(const RunConfig& before, const RunConfig& after) {
  std::vector<std::string> changes;
  for (const Field& f : config_fields()) {
    const std::string a = field_text(before, f), b = field_text(after, f);
    if (a != b) changes.push_back(f.key + ": " + a + " -> " + b);
  }
  return changes;
}

std::vector<std::string> training_changes(const RunConfig& before, const RunConfig& after) {
  // (prefixes: "checkpoint." is every checkpoint key)
  static const char* const kBookkeeping[] = {"run.name",
                                             "run.out_dir",
                                             "run.deterministic",
                                             "checkpoint.",
                                             "logging.",
                                             "distributed.",
                                             "hardware.peak_tflops",  // (MFU's denominator)
                                             "parallel.bucket_mb",
                                             "parallel.overlap_grad_reduce",
                                             "train.stop_after_steps",
                                             "train.eval_every",
                                             "train.spike_factor"};
  std::vector<std::string> changes;
  for (const std::string& c : config_changes(before, after))
    if (std::none_of(std::begin(kBookkeeping), std::end(kBookkeeping),
                     [&](const char* key) { return c.starts_with(key); }))
      changes.push_back(c);
  return changes;
}

std::string config_sha256(const RunConfig& cfg) {
  return sha256_hex(to_yaml(cfg));
}

}  // namespace trainer::config
