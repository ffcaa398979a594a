#include "runtime/report/compare_config.h"

#include <map>
#include <set>

#include "runtime/report/config_json.h"

namespace trainer::report {
namespace {

// Keys every run has its own of (its paths), and keys the rows above already show resolved
// (the layout row shows dp "auto" as the number it became).
const std::set<std::string>& keys_shown_elsewhere() {
  static const std::set<std::string> keys = {
      "run.name", "run.out_dir", "checkpoint.dir", "run.seed", "precision.compute",
      // (the data rows, with the seed and shuffle where they decide the tokens)
      "data.train", "data.val", "data.seed", "data.shuffle", "parallel.dp", "parallel.tp",
      "parallel.pp", "parallel.cp", "parallel.ep", "parallel.zero",
      // (the pipeline row, where a run has a pipeline)
      "parallel.pipeline.schedule", "parallel.pipeline.microbatches",
      "parallel.pipeline.virtual_stages"};
  return keys;
}

}  // namespace

std::vector<std::vector<std::string>> config_rows(const std::vector<LoadedReport>& reports) {
  std::vector<std::map<std::string, std::string>> configs;
  std::vector<std::string> keys;  // in the first report's order that has each
  std::set<std::string> seen;
  for (const LoadedReport& r : reports) {
    configs.push_back(flat_config(r.json));
    for (const auto& [key, value] : configs.back())
      if (!keys_shown_elsewhere().count(key) && seen.insert(key).second) keys.push_back(key);
  }
  std::vector<std::vector<std::string>> rows;
  for (const std::string& key : keys) {
    std::set<std::string> values;
    for (const auto& c : configs)
      if (!c.empty()) values.insert(c.count(key) ? c.at(key) : "(no such key)");
    if (values.size() < 2) continue;
    std::vector<std::string> row{"config: " + key};
    for (const auto& c : configs)
      row.push_back(c.empty() ? "-" : c.count(key) ? c.at(key) : "(no such key)");
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    std::vector<std::string> row{"config (other keys)"};
    for (const auto& c : configs) row.push_back(c.empty() ? "-" : "same");
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace trainer::report
