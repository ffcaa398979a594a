#include "runtime/parallel/zero_layout.h"

#include <algorithm>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/parallel/zero_comm.h"

namespace trainer::parallel {
namespace {

std::vector<Range> ranges_by_unit(const model::ParamLayout& layout) {
  std::vector<Range> out;
  for (const model::ParamSpec& p : layout.params()) {
    if (static_cast<size_t>(p.unit) >= out.size())
      out.resize(static_cast<size_t>(p.unit) + 1, Range{-1, -1});
    Range& r = out[static_cast<size_t>(p.unit)];
    r.begin = r.begin < 0 ? p.offset : std::min(r.begin, p.offset);
    r.end = std::max(r.end, p.offset + p.numel);
  }
  return out;
}

}  // namespace

ZeroUnits::ZeroUnits(const model::ParamLayout& layout, int dp, int edp)
    : shards(layout.total_numel(), dp),
      unit_range(ranges_by_unit(layout)),
      segments(zero_segments(layout, dp, edp)) {
  for_each_unit_part([&](size_t, Range r) {
    range_op_floats = std::max(range_op_floats, RangeReduceScatter::range_op_floats(r));
  });
  for (size_t u = 0; u < unit_range.size(); ++u) {
    int parts = 0;
    for_each_part(static_cast<int>(u), [&](size_t, Range) { ++parts; });
    max_parts = std::max(max_parts, parts);
  }
}

std::vector<ZeroSegment> zero_segments(const model::ParamLayout& layout, int dp, int edp) {
  const int64_t n = layout.total_numel();
  if (edp == 0) return {ZeroSegment{{0, n}, false, ZeroShards(n, dp)}};
  std::vector<std::pair<Range, bool>> runs;  // (flat range, expert), in layout order
  for (const model::ParamSpec& p : layout.params()) {
    if (!runs.empty() && runs.back().second == p.expert && runs.back().first.end == p.offset) {
      runs.back().first.end += p.numel;
    } else {
      runs.push_back({{p.offset, p.offset + p.numel}, p.expert});
    }
  }
  std::vector<ZeroSegment> out;
  for (const auto& [r, expert] : runs) {
    const int group = expert ? edp : dp;
    TRAINER_CHECK(r.size() >= group,
                  "a ZeRO segment of " << r.size() << " elements over " << group << " ranks");
    out.push_back({r, expert, ZeroShards(r.size(), group)});
  }
  return out;
}

int64_t zero1_staging_floats(const std::vector<ZeroSegment>& segments) {
  int64_t floats = 0;
  for (const ZeroSegment& s : segments) floats = std::max(floats, s.shards.chunk());
  return floats;
}

double zero1_traffic_bytes(const std::vector<ZeroSegment>& segments) {
  double bytes = 0;
  for (const ZeroSegment& s : segments)
    bytes += 2.0 * (s.shards.dp() - 1) * 4 * static_cast<double>(s.shards.chunk());
  return bytes;
}

int64_t zero_staging_floats(int stage, const ZeroUnits& u) {
  int64_t floats = 0;
  if (stage <= 2) floats += zero1_staging_floats(u.segments);
  if (stage >= 2) floats += kScattersInFlight * u.range_op_floats;
  return floats;
}

double zero_traffic_bytes(int stage, const ZeroUnits& u, int grad_accum) {
  const double bytes = 4;
  if (stage == 0) {  // each segment's all-reduce over its group (the buckets')
    double all_reduces = 0;
    for (const ZeroSegment& seg : u.segments) {
      const int g = seg.shards.dp();
      all_reduces += 2.0 * (g - 1) / g * bytes * static_cast<double>(seg.flat.size());
    }
    return all_reduces;
  }
  if (stage == 1) return zero1_traffic_bytes(u.segments);
  // A range op of unit i moves each of its parts once (a reduce or broadcast per owner's piece).
  std::vector<double> unit_op;
  for (size_t unit = 0; unit < u.unit_range.size(); ++unit) {
    double op = 0;
    u.for_each_part(static_cast<int>(unit),
                    [&](size_t, Range r) { op += bytes * static_cast<double>(r.size()); });
    unit_op.push_back(op);
  }
  double all_units = 0;
  for (double b : unit_op) all_units += b;
  const double scatters = grad_accum * all_units;
  if (stage == 2) return scatters + zero1_traffic_bytes(u.segments) / 2;  // (the gathers' half)
  const double blocks = all_units - unit_op.front() - unit_op.back();
  const double forward_gathers = all_units + (grad_accum - 1) * (all_units - unit_op.front());
  return scatters + forward_gathers + grad_accum * blocks;
}

Zero3Params zero3_peak_params(const ZeroUnits& u) {
  const std::vector<Range>& units = u.unit_range;
  const Range embedding = units.front();
  const int64_t dp = u.shards.dp(), numel = u.shards.numel();
  const auto overlap = [](Range a, Range b) {
    return std::max<int64_t>(0, std::min(a.end, b.end) - std::max(a.begin, b.begin));
  };
  if (units.size() <= 2) return {numel, numel};  // (no block: every unit at once)
  Zero3Params p;
  for (size_t k = 1; k + 1 < units.size(); ++k)  // units k and k + 1 (adjacent) beside unit 0
    p.gathered = std::max(p.gathered, embedding.size() + units[k].size() + units[k + 1].size());
  // Which rank's shard overlaps the gathered units least: every rank against every pair, up to
  // a million of those; beyond, a shard beside them (the bound, which many ranks' small shards
  // nearly reach).
  if (dp * static_cast<int64_t>(units.size()) > 1'000'000) {
    p.held = std::min(numel, u.shards.shard(static_cast<int>(dp - 1)).size() + p.gathered);
    return p;
  }
  for (int r = 0; r < dp; ++r) {
    const Range mine = u.shards.shard(r);
    for (size_t k = 1; k + 1 < units.size(); ++k) {
      const Range pair{units[k].begin, units[k + 1].end};
      const int64_t gathered = embedding.size() + pair.size();
      p.held =
          std::max(p.held, mine.size() + gathered - overlap(mine, embedding) - overlap(mine, pair));
    }
  }
  p.held = std::min(p.held, numel);
  return p;
}

}  // namespace trainer::parallel
