// ReleasedSpans against a byte-by-byte model: random releases and acquires over a small space.
#include "runtime/core/released_spans.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

using trainer::ByteSpan;
using trainer::ReleasedSpans;

namespace {

std::vector<bool> marks(const std::vector<ByteSpan>& spans, size_t n) {
  std::vector<bool> m(n, false);
  for (const ByteSpan& s : spans) {
    REQUIRE(s.begin < s.end);
    REQUIRE(s.end <= n);
    for (uintptr_t i = s.begin; i < s.end; ++i) {
      REQUIRE_FALSE(m[i]);  // spans do not overlap
      m[i] = true;
    }
  }
  return m;
}

}  // namespace

TEST_CASE("released_spans_drop_whole_units_fill_the_rest_and_take_back_what_is_touched",
          "[released_spans]") {
  constexpr size_t kUnit = 16, kSize = 40 * kUnit;
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    ReleasedSpans spans(kUnit);
    std::vector<bool> dropped(kSize / kUnit, false), needed(kSize, true);
    for (int op = 0; op < 200; ++op) {
      uintptr_t a = rng() % (kSize + 1), b = rng() % (kSize + 1);
      if (a > b) std::swap(a, b);
      if (rng() % 2 == 0) {
        const ReleasedSpans::Release r = spans.release(a, b);
        for (uintptr_t i = a; i < b; ++i) needed[i] = false;
        std::vector<bool> want_drop(kSize, false), want_fill(kSize, false);
        for (size_t u = 0; u < dropped.size(); ++u) {
          const bool inside = u * kUnit >= a && (u + 1) * kUnit <= b;
          if (inside && !dropped[u])
            for (size_t i = u * kUnit; i < (u + 1) * kUnit; ++i) want_drop[i] = true;
          dropped[u] = dropped[u] || inside;
        }
        for (uintptr_t i = a; i < b; ++i) want_fill[i] = !dropped[i / kUnit];
        CHECK(marks(r.drop, kSize) == want_drop);
        CHECK(marks(r.fill, kSize) == want_fill);
        for (const ByteSpan& d : r.drop) CHECK((d.begin % kUnit == 0 && d.end % kUnit == 0));
      } else {
        const std::vector<ByteSpan> back = spans.acquire(a, b);
        std::vector<bool> want(kSize, false);
        for (size_t u = 0; u < dropped.size(); ++u)
          if (dropped[u] && a < b && u * kUnit < b && (u + 1) * kUnit > a) {  // (empty: none)
            for (size_t i = u * kUnit; i < (u + 1) * kUnit; ++i) want[i] = true;
            dropped[u] = false;
          }
        for (uintptr_t i = a; i < b; ++i) needed[i] = true;
        CHECK(marks(back, kSize) == want);
      }
      // A dropped unit holds no byte that is needed, and the counts agree.
      uintptr_t total = 0;
      for (size_t u = 0; u < dropped.size(); ++u) {
        if (!dropped[u]) continue;
        total += kUnit;
        for (size_t i = u * kUnit; i < (u + 1) * kUnit; ++i) REQUIRE_FALSE(needed[i]);
      }
      REQUIRE(spans.dropped_bytes() == total);
      const uintptr_t lo = rng() % kSize, hi = lo + rng() % (kSize - lo + 1);
      uintptr_t within = 0;
      for (uintptr_t i = lo; i < hi; ++i) within += dropped[i / kUnit] ? 1 : 0;
      REQUIRE(spans.dropped_within(lo, hi) == within);
    }
  }
}

TEST_CASE("released_spans_merge_neighbours_and_split_on_a_partial_acquire", "[released_spans]") {
  ReleasedSpans spans(4096);
  CHECK(spans.release(4096, 8192).drop == std::vector<ByteSpan>{{4096, 8192}});
  CHECK(spans.release(8192, 16384).drop == std::vector<ByteSpan>{{8192, 16384}});
  // a range over both, and a byte past them: nothing new to drop, only the byte to fill
  const ReleasedSpans::Release again = spans.release(4096, 16385);
  CHECK(again.drop.empty());
  CHECK(again.fill == std::vector<ByteSpan>{{16384, 16385}});
  CHECK(spans.acquire(9000, 9001) == std::vector<ByteSpan>{{8192, 12288}});
  CHECK(spans.dropped_bytes() == 2 * 4096);
  CHECK(spans.acquire(0, 1 << 20) == std::vector<ByteSpan>{{4096, 8192}, {12288, 16384}});
  CHECK(spans.dropped_bytes() == 0);
}
