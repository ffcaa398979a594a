// Naming a hung rank asks the store a number of times that does not grow with the group: every
// member of a group that fails together polls the marks of all the others, and a request per
// key made that size^2 requests per poll at the server (failure_report.cpp,
// Store::get_existing and which_exist).
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/failure_report.h"
#include "runtime/dist/prefix_store.h"
#include "runtime/dist/tcp_store.h"

using namespace trainer::dist;
using namespace std::chrono_literals;

namespace {

// Forwards to `base`, counting the requests.
class CountingStore : public Store {
 public:
  explicit CountingStore(std::shared_ptr<Store> base) : base_(std::move(base)) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    ++requests;
    base_->set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    ++requests;
    return base_->get(key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    ++requests;
    return base_->add(key, delta);
  }
  void wait(const std::vector<std::string>& keys) override {
    ++requests;
    base_->wait(keys);
  }
  bool check(const std::vector<std::string>& keys) override {
    ++requests;
    return base_->check(keys);
  }
  std::vector<MaybeValue> get_existing(const std::vector<std::string>& keys) override {
    ++requests;
    return base_->get_existing(keys);
  }
  std::vector<bool> which_exist(const std::vector<std::string>& keys) override {
    ++requests;
    return base_->which_exist(keys);
  }
  void set_timeout(std::chrono::milliseconds t) override { base_->set_timeout(t); }
  std::chrono::milliseconds timeout() const override { return base_->timeout(); }

  std::atomic<int> requests{0};

 private:
  std::shared_ptr<Store> base_;
};

// Rank 0 of `size` timed out in op 7; every member but the last reached it. Returns the store
// requests rank 0 made to name the last one.
int requests_to_name_a_hung_rank(int size) {
  auto server = std::make_shared<TcpStore>("127.0.0.1", 0, true, 5000ms);
  auto marks = make_prefix_store(server, "dp");
  for (int j = 1; j < size - 1; ++j) marks->set("arrived/7/" + std::to_string(j), {'1'});
  auto counting =
      std::make_shared<CountingStore>(make_tcp_store("127.0.0.1", server->port(), false, 5000ms));
  auto group = make_prefix_store(counting, "dp");
  const FailureScope scope{group.get(), counting.get(), 0, size, [](int j) { return j; }, 1.0};
  const std::string who = name_failed_ranks(scope, OpId::collective(7), "timed out", true);
  INFO("size " << size << ": " << who);
  CHECK(who == "ranks that did not arrive: " + std::to_string(size - 1));
  return counting->requests.load();
}

}  // namespace

TEST_CASE("naming_a_hung_rank_asks_the_store_as_often_in_a_large_group_as_in_a_small_one",
          "[comm][fault]") {
  const int small = requests_to_name_a_hung_rank(8);
  const int large = requests_to_name_a_hung_rank(256);
  INFO("store requests: " << small << " in a group of 8, " << large << " in a group of 256");
  CHECK(small < 200);        // a grace of polls (0.2 s at timeout 1 s) and the chain's settling
  CHECK(large < 2 * small);  // a request per key: about 32 times as many
}

TEST_CASE("a_group_of_256_timing_out_together_names_the_one_hung_member", "[comm][fault]") {
  // 255 members (threads, each its own store client) time out in op 7 together; member 255
  // hung before it. Each names 255 as the rank that hung: alone when it saw the other 254 arrive
  // within its grace (1 s at timeout 10 s), or at the end of the chain through members that
  // arrived late (they publish that they waited for 255; under ThreadSanitizer's slowdown some
  // do). A live member is never named as hung.
  constexpr int kSize = 256;
  auto server = std::make_shared<TcpStore>("127.0.0.1", 0, true, 60000ms);
  std::vector<std::string> named(kSize - 1);
  std::vector<std::thread> members;
  std::latch connected(kSize - 1);
  for (int r = 0; r < kSize - 1; ++r)
    members.emplace_back([&, r] {
      auto root = make_tcp_store("127.0.0.1", server->port(), false, 60000ms);
      auto group = make_prefix_store(root, "dp");
      const FailureScope scope{group.get(), root.get(), r, kSize, [](int j) { return j; }, 10.0};
      connected.arrive_and_wait();  // time out together, as a group stuck in one op does
      named[static_cast<size_t>(r)] =
          name_failed_ranks(scope, OpId::collective(7), "timed out", true);
    });
  for (auto& t : members) t.join();
  const std::string alone = "ranks that did not arrive: 255";
  const std::string chain_end = ", blocked in turn on rank(s) 255 (hung or dead)";
  for (int r = 0; r < kSize - 1; ++r) {
    const std::string& who = named[static_cast<size_t>(r)];
    INFO("member " << r << ": " << who);
    const bool at_chain_end =
        who.rfind("ranks that did not arrive: ", 0) == 0 && who.size() > chain_end.size() &&
        who.compare(who.size() - chain_end.size(), chain_end.size(), chain_end) == 0;
    CHECK((who == alone || at_chain_end));
  }
}
