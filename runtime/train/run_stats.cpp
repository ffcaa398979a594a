#include "runtime/train/run_stats.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <string>

#include "runtime/core/host_name.h"
#include "runtime/report/report_builder.h"
#include "runtime/train/process_stats.h"

namespace trainer::train {

std::vector<double> gather_median_step_times(dist::Comm* world, const std::vector<double>& mine) {
  double median = report::median_step_time(mine);
  if (world == nullptr || world->size() == 1) return {median};
  std::vector<double> all(static_cast<size_t>(world->size()));
  world->all_gather(&median, all.data(), 1, dist::CommDType::f64);
  return all;
}

std::vector<int64_t> gather_peak_memory(dist::Comm* world, const Backend& backend) {
  int64_t mine = backend.peak_device_bytes().value_or(peak_rss_bytes());
  if (world == nullptr || world->size() == 1) return {mine};
  std::vector<int64_t> all(static_cast<size_t>(world->size()));
  world->all_gather(&mine, all.data(), 1, dist::CommDType::i64);
  return all;
}

std::vector<report::MemoryBreakdown> gather_stage_memory(dist::Comm* world, const dist::Mesh& mesh,
                                                         const report::MemoryBreakdown& mine) {
  if (world == nullptr || world->size() == 1) return {mine};
  const std::array<int64_t, 5> fields{mine.params, mine.grads, mine.optimizer, mine.activations,
                                      mine.zero_staging};
  std::vector<int64_t> all(fields.size() * static_cast<size_t>(world->size()));
  world->all_gather(fields.data(), all.data(), fields.size(), dist::CommDType::i64);
  std::vector<report::MemoryBreakdown> stages;
  for (int s = 0; s < mesh.shape().pp; ++s) {
    const auto* f = &all[static_cast<size_t>(mesh.rank_of({0, s, 0, 0})) * fields.size()];
    stages.push_back({f[0], f[1], f[2], f[3], f[4]});
  }
  return stages;
}

int count_nodes(dist::Comm* world) {
  const auto mine = static_cast<int64_t>(std::hash<std::string>{}(host_name()));
  if (world == nullptr || world->size() == 1) return 1;
  std::vector<int64_t> all(static_cast<size_t>(world->size()));
  world->all_gather(&mine, all.data(), 1, dist::CommDType::i64);
  std::sort(all.begin(), all.end());
  return static_cast<int>(std::unique(all.begin(), all.end()) - all.begin());
}

double mean_after(const std::vector<double>& v, int skip) {
  double sum = 0;
  size_t n = 0;
  for (size_t i = static_cast<size_t>(std::max(0, skip)); i < v.size(); ++i, ++n) sum += v[i];
  return n ? sum / static_cast<double>(n) : std::nan("");
}

report::MemoryBreakdown memory_breakdown(const TrainStep& step) {
  report::MemoryBreakdown mem;
  const parallel::ZeroMemory state = step.state_bytes();
  mem.params = state.params;  // the bf16 copy included
  mem.grads = state.grads;
  mem.optimizer = state.optimizer;
  mem.zero_staging = state.scratch;
  mem.activations = static_cast<int64_t>(step.activation_bytes());
  return mem;
}

}  // namespace trainer::train
