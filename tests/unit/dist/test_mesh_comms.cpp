// Mesh::create_comms with a recording fake factory: every group gets one consistent store prefix,
// size and member list on all of its ranks, and comm(Axis) returns the matching communicator.
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/dist/mesh.h"

using namespace trainer::dist;

namespace {

struct Call {
  int world_rank, rank, size;
  std::string name;
  std::vector<int> global_ranks;
  double timeout_s;
};

// A Comm that only knows its place; collectives are not needed here. on_destroy: called with
// its name when it goes.
class FakeComm : public Comm {
 public:
  FakeComm(int rank, int size, CommOptions o,
           std::function<void(const std::string&)> on_destroy = {})
      : rank_(rank), size_(size), opts_(std::move(o)), on_destroy_(std::move(on_destroy)) {}
  ~FakeComm() override {
    if (on_destroy_) on_destroy_(opts_.name);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return opts_.name; }
  int global_rank(int i) const override { return opts_.global_ranks.at(i); }
  void all_reduce(void*, size_t, CommDType, ReduceOp) override {}
  std::shared_ptr<Work> all_reduce_async(void*, size_t, CommDType, ReduceOp) override {
    return nullptr;
  }
  void reduce_scatter(const void*, void*, size_t, CommDType, ReduceOp) override {}
  std::shared_ptr<Work> reduce_scatter_async(const void*, void*, size_t, CommDType,
                                             ReduceOp) override {
    return nullptr;
  }
  void all_gather(const void*, void*, size_t, CommDType) override {}
  std::shared_ptr<Work> all_gather_async(const void*, void*, size_t, CommDType) override {
    return nullptr;
  }
  void broadcast(void*, size_t, CommDType, int) override {}
  std::shared_ptr<Work> broadcast_async(void*, size_t, CommDType, int) override { return nullptr; }
  std::shared_ptr<Work> reduce_async(void*, size_t, CommDType, ReduceOp, int) override {
    return nullptr;
  }
  void all_to_all(const void*, void*, size_t, CommDType) override {}
  void send(const void*, size_t, int, int) override {}
  void recv(void*, size_t, int, int) override {}
  void send_recv_batch(const std::vector<P2pTransfer>&) override {}
  void barrier() override {}

 private:
  int rank_, size_;
  CommOptions opts_;
  std::function<void(const std::string&)> on_destroy_;
};

}  // namespace

TEST_CASE("create_comms_gives_each_group_one_prefix_and_consistent_members", "[mesh]") {
  for (MeshShape s :
       {MeshShape{2, 2, 1, 2, 1}, MeshShape{2, 1, 2, 2, 2}, MeshShape{3, 2, 1, 2, 3}}) {
    std::map<std::string, std::vector<Call>> by_prefix;
    for (int r = 0; r < s.world(); ++r) {
      Mesh m(r, s.world(), s);
      m.create_comms(
          [&](const std::string& prefix, int rank, int size, const CommOptions& o) {
            by_prefix[prefix].push_back({r, rank, size, o.name, o.global_ranks, o.timeout_s});
            return std::make_unique<FakeComm>(rank, size, o);
          },
          42.0);
      for (Axis a : kAllAxes) {
        INFO("rank " << r << " axis " << axis_name(a));
        CHECK(m.comm(a).name() == axis_name(a));
        CHECK(m.comm(a).size() == m.size(a));
        CHECK(m.comm(a).rank() == m.index(a));
        CHECK(m.comm(a).global_rank(m.comm(a).rank()) == r);
      }
    }
    // Each rank joins exactly one group per axis, so prefixes x members = axes x world.
    size_t calls = 0;
    for (const auto& [prefix, group_calls] : by_prefix) {
      INFO("prefix " << prefix);
      calls += group_calls.size();
      const Call& first = group_calls.front();
      CHECK(prefix.rfind(first.name + "/", 0) == 0);
      CHECK(static_cast<int>(group_calls.size()) == first.size);
      std::set<int> ranks_in_group;
      for (const Call& c : group_calls) {
        CHECK(c.global_ranks == first.global_ranks);
        CHECK(c.global_ranks.at(c.rank) == c.world_rank);
        CHECK(c.timeout_s == 42.0);
        ranks_in_group.insert(c.rank);
      }
      CHECK(static_cast<int>(ranks_in_group.size()) == first.size);
    }
    CHECK(calls == kAllAxes.size() * static_cast<size_t>(s.world()));
  }
}

TEST_CASE("comm_before_create_comms_is_an_error", "[mesh]") {
  Mesh m(0, 1, MeshShape{});
  CHECK_THROWS_AS(m.comm(Axis::dp), trainer::CheckError);
}

// A mesh going away (run.cpp keeps it inside the backend's lifetime, so that NCCL comms abort
// before the backend frees device memory) destroys every communicator, the last made first.
TEST_CASE("a_mesh_destroys_every_comm_in_reverse_creation_order", "[mesh]") {
  std::vector<std::string> made, destroyed;
  {
    Mesh m(0, 1, MeshShape{});
    m.create_comms(
        [&](const std::string&, int rank, int size, const CommOptions& opts) {
          made.push_back(opts.name);
          return std::make_unique<FakeComm>(rank, size, opts,
                                            [&](const std::string& n) { destroyed.push_back(n); });
        },
        1.0);
    REQUIRE(made.size() == kAllAxes.size());
    CHECK(destroyed.empty());
  }
  CHECK(destroyed == std::vector<std::string>(made.rbegin(), made.rend()));
}
