// HostShard: checkpoints are written from and read into host memory. Without a copy it hands out
// the owned memory itself; with one (device backends) pull() and push() move exactly the owned
// range [begin, end) of the weights and both moments, and nothing else.
#include <catch2/catch.hpp>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/train/host_shard.h"

using namespace trainer;

namespace {

struct OwnedBuffers {
  std::vector<float> params, m, v;
  explicit OwnedBuffers(size_t n) : params(n), m(n), v(n) {
    for (size_t i = 0; i < n; ++i) {
      params[i] = 1.0f + static_cast<float>(i);
      m[i] = 100.0f + static_cast<float>(i);
      v[i] = 1000.0f + static_cast<float>(i);
    }
  }
  // The shard [begin, end) of a buffer of `params.size()` elements, as TrainStep describes it.
  train::OwnedState owned(int64_t begin, int64_t end) {
    return {{{begin, end, params.data() + begin, m.data(), v.data()}}, 7};
  }
};

}  // namespace

TEST_CASE("host_shard_without_copy_hands_out_the_owned_memory") {
  cpu::CpuBackend be;
  OwnedBuffers buf(10);
  train::HostShard host(be, buf.owned(2, 6));  // cpu: no copy
  REQUIRE(host.shard().size() == 1);
  const ckpt::OwnedShard s = host.shard()[0];
  CHECK(s.begin == 2);
  CHECK(s.end == 6);
  CHECK(s.params == buf.params.data() + 2);
  CHECK(s.m == buf.m.data());
  CHECK(s.v == buf.v.data());
}

TEST_CASE("host_shard_copy_pulls_and_pushes_exactly_the_owned_range") {
  cpu::CpuBackend be;
  OwnedBuffers buf(10);
  const std::vector<float> params0 = buf.params;
  train::HostShard host(be, buf.owned(2, 6), /*copy=*/true);
  host.pull();
  REQUIRE(host.shard().size() == 1);
  ckpt::OwnedShard s = host.shard()[0];
  REQUIRE(s.params != buf.params.data() + 2);  // a separate host copy
  for (int i = 0; i < 4; ++i) {
    INFO("element " << i);
    CHECK(s.params[i] == buf.params[static_cast<size_t>(2 + i)]);
    CHECK(s.m[i] == buf.m[static_cast<size_t>(i)]);
    CHECK(s.v[i] == buf.v[static_cast<size_t>(i)]);
  }
  // A load writes the host copy; push() puts it back into the owned range only.
  for (int i = 0; i < 4; ++i) {
    s.params[i] = -1.0f - static_cast<float>(i);
    s.m[i] = -2.0f;
    s.v[i] = -3.0f;
  }
  host.push();
  for (size_t i = 0; i < 10; ++i) {
    INFO("element " << i);
    const bool owned = i >= 2 && i < 6;
    CHECK(buf.params[i] == (owned ? -1.0f - static_cast<float>(i - 2) : params0[i]));
  }
  for (size_t i = 0; i < 4; ++i) {
    CHECK(buf.m[i] == -2.0f);
    CHECK(buf.v[i] == -3.0f);
  }
  CHECK(buf.m[4] == 104.0f);  // the moments past the owned length are untouched
}

TEST_CASE("host_shard_copy_of_an_empty_shard_is_a_no_op") {
  cpu::CpuBackend be;
  train::HostShard host(be, train::OwnedState{}, /*copy=*/true);
  host.pull();
  host.push();
  CHECK(host.shard().empty());
}

TEST_CASE("host_shard_is_reused_only_for_the_same_range_memory_and_mode") {
  cpu::CpuBackend be;
  OwnedBuffers buf(10), other(10);
  train::HostShard host(be, buf.owned(2, 6), /*copy=*/true);
  CHECK(host.holds(buf.owned(2, 6), true));
  CHECK_FALSE(host.holds(buf.owned(2, 6), false));  // an async save must never write live memory
  CHECK_FALSE(host.holds(buf.owned(0, 6), true));
  CHECK_FALSE(host.holds(other.owned(2, 6), true));
}
