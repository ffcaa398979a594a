#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <sstream>
#include <vector>

#include "../dist/comm_harness.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/parallel/zero_comm.h"

using namespace trainer;
using parallel::Range;
using parallel::ZeroShards;

namespace {

// Rank r's local buffer: element i = (r + 1) * 1000 + i; the sum over ranks is known exactly.
std::vector<float> rank_buffer(int rank, int64_t n) {
  std::vector<float> b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    b[static_cast<size_t>(i)] = static_cast<float>((rank + 1) * 1000 + i);
  return b;
}

float summed(int size, int64_t i) {
  float s = 0;
  for (int r = 0; r < size; ++r) s += static_cast<float>((r + 1) * 1000 + i);
  return s;
}

Tensor as_tensor(std::vector<float>& v) {
  return Tensor(v.data(), {static_cast<int64_t>(v.size())});
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

std::string at(int64_t i, float got, float want) {
  std::ostringstream o;
  o << "element " << i << ": got " << got << ", want " << want;
  return o.str();
}

void check_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
}

}  // namespace

TEST_CASE("zero whole-buffer reduce-scatter leaves the sum on each shard, gather makes it whole",
          "[zero]") {
  const int64_t n = 103;  // not divisible by 3: the last rank holds the remainder
  check_no_errors(dist::testing::run_ranks(3, [&](dist::testing::RankContext& ctx) {
    auto comm = dist::testing::make_comm(ctx, 10);
    cpu::CpuBackend be;
    const ZeroShards s(n, ctx.size);
    std::vector<float> buf = rank_buffer(ctx.rank, n);
    BackendBuffer staging(be, s.chunk());
    parallel::reduce_scatter_in_place(*comm, s, as_tensor(buf));
    const Range mine = s.shard(ctx.rank);
    for (int64_t i = mine.begin; i < mine.end; ++i)
      expect(buf[static_cast<size_t>(i)] == summed(ctx.size, i),
             at(i, buf[static_cast<size_t>(i)], summed(ctx.size, i)));
    // Only the owners' shards are valid: scribble on the rest, then gather.
    for (int64_t i = 0; i < n; ++i)
      if (i < mine.begin || i >= mine.end) buf[static_cast<size_t>(i)] = -1;
    parallel::all_gather_in_place(be, *comm, s, as_tensor(buf), staging.tensor());
    for (int64_t i = 0; i < n; ++i)
      expect(buf[static_cast<size_t>(i)] == summed(ctx.size, i),
             at(i, buf[static_cast<size_t>(i)], summed(ctx.size, i)));
  }));
}

TEST_CASE("zero range reduce-scatter adds each owner's piece; range gather restores the range",
          "[zero]") {
  const int64_t n = 100;
  // Ranges inside one shard, across two, across all, and one that leaves some ranks empty.
  const std::vector<Range> ranges = {{3, 20}, {20, 55}, {0, 100}, {60, 100}};
  check_no_errors(dist::testing::run_ranks(4, [&](dist::testing::RankContext& ctx) {
    auto comm = dist::testing::make_comm(ctx, 10);
    cpu::CpuBackend be;
    const ZeroShards s(n, ctx.size);
    const Range mine = s.shard(ctx.rank);
    int64_t staging = 0;
    for (const Range& r : ranges)
      staging = std::max(staging, parallel::RangeReduceScatter::range_op_floats(r));
    // One object each for every range, as ZeroOptimizer reuses them.
    parallel::RangeReduceScatter scatter(be, staging);
    parallel::RangeGather gather;
    for (const Range& r : ranges) {
      std::vector<float> buf = rank_buffer(ctx.rank, n);
      std::vector<float> acc(static_cast<size_t>(mine.size()), 1.0f);
      scatter.start(*comm, s, as_tensor(buf), r);
      std::fill(buf.begin(), buf.end(), -5.0f);  // start() staged its copy: buf is free now
      scatter.finish(as_tensor(acc));
      for (int64_t i = mine.begin; i < mine.end; ++i) {
        const bool in = i >= r.begin && i < r.end;
        const float want = 1.0f + (in ? summed(ctx.size, i) : 0.0f);
        expect(acc[static_cast<size_t>(i - mine.begin)] == want,
               at(i, acc[static_cast<size_t>(i - mine.begin)], want));
      }
      std::vector<float> whole = rank_buffer(0, n), part = whole;
      for (int64_t i = r.begin; i < r.end; ++i)
        if (i < mine.begin || i >= mine.end) part[static_cast<size_t>(i)] = -7;
      gather.start(*comm, s, as_tensor(part), r);
      gather.finish();
      for (int64_t i = 0; i < n; ++i)
        expect(part[static_cast<size_t>(i)] == whole[static_cast<size_t>(i)],
               at(i, part[static_cast<size_t>(i)], whole[static_cast<size_t>(i)]));
    }
  }));
}

TEST_CASE("zero range reduce-scatters in flight together land in issue order", "[zero]") {
  const int64_t n = 90;
  const std::vector<Range> ranges = {{0, 30}, {30, 70}, {70, 90}, {10, 80}};
  check_no_errors(dist::testing::run_ranks(3, [&](dist::testing::RankContext& ctx) {
    auto comm = dist::testing::make_comm(ctx, 10);
    cpu::CpuBackend be;
    const ZeroShards s(n, ctx.size);
    const Range mine = s.shard(ctx.rank);
    std::vector<float> buf = rank_buffer(ctx.rank, n);
    std::vector<float> acc(static_cast<size_t>(mine.size()), 0.0f);
    std::vector<std::unique_ptr<parallel::RangeReduceScatter>> flying;
    for (const Range& r : ranges) {  // all posted before any is waited on
      flying.push_back(std::make_unique<parallel::RangeReduceScatter>(
          be, parallel::RangeReduceScatter::range_op_floats(r)));
      flying.back()->start(*comm, s, as_tensor(buf), r);
    }
    for (auto& f : flying) f->finish(as_tensor(acc));
    for (int64_t i = mine.begin; i < mine.end; ++i) {
      int covered = 0;
      for (const Range& r : ranges) covered += (i >= r.begin && i < r.end) ? 1 : 0;
      const float want = static_cast<float>(covered) * summed(ctx.size, i);
      expect(acc[static_cast<size_t>(i - mine.begin)] == want,
             at(i, acc[static_cast<size_t>(i - mine.begin)], want));
    }
  }));
}
