// Store behaviour shared by TcpStore and FileStore: set/get/add/wait/check, timeouts that name
// the missing keys, and counters that stay exact under concurrent adds.
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

#include "runtime/dist/prefix_store.h"
#include "runtime/dist/store.h"
#include "runtime/dist/tcp_store.h"
#include "tests/unit/temp_dir.h"

using namespace trainer::dist;
using namespace std::chrono_literals;

namespace {

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text(const std::vector<uint8_t>& v) {
  return {v.begin(), v.end()};
}

std::string fresh_dir(const std::string& name) {
  static const trainer::testing::TempDir root("store");  // removed at the test's exit
  auto base = root.path() / name;
  std::filesystem::remove_all(base);
  return base.string();
}

// A server store plus a way to open further clients (another "rank") on the same data.
struct Fixture {
  std::shared_ptr<Store> server;
  std::function<std::shared_ptr<Store>()> client;
};

Fixture tcp_fixture(std::chrono::milliseconds timeout) {
  auto s = std::make_shared<TcpStore>("127.0.0.1", 0, true, timeout);
  int port = s->port();
  return {s, [port, timeout] { return make_tcp_store("127.0.0.1", port, false, timeout); }};
}

Fixture file_fixture(std::chrono::milliseconds timeout) {
  std::string dir = fresh_dir("kv");
  return {make_file_store(dir, timeout), [dir, timeout] { return make_file_store(dir, timeout); }};
}

void check_store_semantics(const Fixture& f) {
  auto a = f.server;
  auto b = f.client();
  SECTION("a value set by one client is read by another, byte for byte") {
    std::vector<uint8_t> v = {0, 1, 2, 255, 0, 7};
    a->set("x/y", v);
    CHECK(b->get("x/y") == v);
    a->set("x/y", bytes("second"));
    CHECK(text(b->get("x/y")) == "second");
  }
  SECTION("get blocks until another client sets the key") {
    std::thread setter([&] {
      std::this_thread::sleep_for(100ms);
      b->set("late", bytes("here"));
    });
    CHECK(text(a->get("late")) == "here");
    setter.join();
  }
  SECTION("add counts from zero and returns the running total under concurrency") {
    constexpr int kThreads = 4, kAdds = 25;
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&] {
        auto c = f.client();
        for (int i = 0; i < kAdds; ++i) c->add("n", 1);
      });
    for (auto& t : ts) t.join();
    CHECK(a->add("n", 0) == kThreads * kAdds);
    CHECK(a->add("n", -5) == kThreads * kAdds - 5);
  }
  SECTION("check is non-blocking and wait returns once all keys exist") {
    CHECK_FALSE(a->check({"k1", "k2"}));
    a->set("k1", bytes("1"));
    CHECK_FALSE(b->check({"k1", "k2"}));
    b->set("k2", bytes("2"));
    CHECK(a->check({"k1", "k2"}));
    a->wait({"k1", "k2"});
  }
  SECTION("a parked wait returns when its last missing key arrives, by set or add") {
    a->set("w/present", bytes("p"));
    std::thread setter([&] {
      auto c = f.client();
      std::this_thread::sleep_for(50ms);
      c->set("w/1", bytes("1"));
      std::this_thread::sleep_for(50ms);
      c->add("w/2", 1);
    });
    b->wait({"w/present", "w/1", "w/2", "w/1"});  // (a key twice: waited for once)
    setter.join();
    CHECK(b->get("w/2") == bytes("1"));
  }
  SECTION("get and wait time out naming the missing keys only") {
    a->set("present", bytes("p"));
    b->set_timeout(200ms);
    auto t0 = std::chrono::steady_clock::now();
    try {
      b->wait({"present", "absent_one", "absent_two"});
      FAIL("wait returned without the keys");
    } catch (const StoreTimeout& e) {
      std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find("absent_one") != std::string::npos);
      CHECK(msg.find("absent_two") != std::string::npos);
      CHECK(msg.find("'present'") == std::string::npos);
    }
    auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(waited >= 190ms);
    CHECK(waited < 2s);
    CHECK_THROWS_AS(b->get("never"), StoreTimeout);
  }
  SECTION(
      "get_existing and which_exist answer for the keys that exist, in order, without blocking") {
    a->set("e/1", bytes("one"));
    a->set("e/3", std::vector<uint8_t>{});  // an empty value exists
    b->set_timeout(5000ms);
    auto t0 = std::chrono::steady_clock::now();
    const std::vector<MaybeValue> got = b->get_existing({"e/0", "e/1", "e/2", "e/3", "e/1"});
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
    REQUIRE(got.size() == 5);
    CHECK_FALSE(got[0]);
    REQUIRE(got[1]);
    CHECK(text(*got[1]) == "one");
    CHECK_FALSE(got[2]);
    REQUIRE(got[3]);
    CHECK(got[3]->empty());
    REQUIRE(got[4]);
    CHECK(text(*got[4]) == "one");
    CHECK(b->get_existing({}).empty());
    CHECK(b->which_exist({"e/0", "e/1", "e/2", "e/3"}) ==
          std::vector<bool>{false, true, false, true});
    CHECK(b->which_exist({}).empty());
    auto pb = make_prefix_store(b, "e");  // through a prefix store, prefixed
    const std::vector<MaybeValue> prefixed = pb->get_existing({"1", "2"});
    REQUIRE(prefixed.size() == 2);
    CHECK((prefixed[0] && text(*prefixed[0]) == "one"));
    CHECK_FALSE(prefixed[1]);
    CHECK(pb->which_exist({"2", "3"}) == std::vector<bool>{false, true});
  }
  SECTION("a prefix store keeps its keys apart and reaches the same data") {
    auto pa = make_prefix_store(a, "grp");
    pa->set("k", bytes("inner"));
    CHECK(text(b->get("grp/k")) == "inner");
    CHECK_FALSE(a->check({"k"}));
    CHECK(root_store(make_prefix_store(pa, "sub")) == a);
  }
}

}  // namespace

TEST_CASE("tcp_store_set_get_add_wait_and_timeouts", "[store]") {
  check_store_semantics(tcp_fixture(5000ms));
}

TEST_CASE("file_store_set_get_add_wait_and_timeouts", "[store]") {
  check_store_semantics(file_fixture(5000ms));
}

// add() on a key holding text is an error, and does not keep the key's lock: adds still work.
TEST_CASE("file_store_add_on_a_non_number_is_an_error_that_releases_the_key", "[store]") {
  auto store = file_fixture(1000ms).server;
  store->set("k", bytes("abc"));
  CHECK_THROWS_WITH(store->add("k", 1), Catch::Contains("'k' holds 'abc'"));
  store->set("k", bytes("41"));
  CHECK(store->add("k", 1) == 42);
}

TEST_CASE("file_store_readers_never_see_partial_values", "[store]") {
  auto f = file_fixture(5000ms);
  auto reader = f.client();
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < 200; ++i)
      f.server->set("big",
                    std::vector<uint8_t>(i % 2 ? 100000 : 50000, static_cast<uint8_t>(i % 2)));
    stop = true;
  });
  size_t bad = 0;
  while (!stop) {
    if (!reader->check({"big"})) continue;
    auto v = reader->get("big");
    bool whole = (v.size() == 100000 && v[0] == 1) || (v.size() == 50000 && v[0] == 0);
    if (!whole) ++bad;
  }
  writer.join();
  CHECK(bad == 0);
}
