// WorkQueue: FIFO on one thread; a failed job breaks the queue (later jobs finish at once with its
// error, as ops on a failed communicator); jobs not started when it is destroyed never run.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/dist/work_queue.h"

using namespace trainer::dist;
using Catch::Matchers::Contains;

TEST_CASE("work_queue_runs_jobs_in_issue_order", "[comm][queue]") {
  std::vector<int> order;
  std::vector<std::shared_ptr<Work>> works;
  {
    WorkQueue queue;
    for (int i = 0; i < 50; ++i)
      works.push_back(queue.enqueue([&order, i] { order.push_back(i); }));
    for (auto& w : works) w->wait();
  }
  REQUIRE(order.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(order[static_cast<size_t>(i)] == i);
}

TEST_CASE("work_queue_after_a_failed_job_fails_the_rest_without_running_them", "[comm][queue]") {
  WorkQueue queue;
  std::atomic<int> ran{0};
  auto first = queue.enqueue([] { throw CommError("comm 'dp' all_reduce: rank 1 failed"); });
  std::vector<std::shared_ptr<Work>> later;
  for (int i = 0; i < 5; ++i)
    later.push_back(queue.enqueue([&ran] {
      ++ran;
      std::this_thread::sleep_for(std::chrono::seconds(2));  // a collective waiting out its timeout
    }));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(first->wait(), Contains("rank 1 failed"));
  for (auto& w : later) CHECK_THROWS_WITH(w->wait(), Contains("rank 1 failed"));
  auto after = queue.enqueue([&ran] { ++ran; });  // also ops issued after the failure
  CHECK_THROWS_WITH(after->wait(), Contains("rank 1 failed"));
  CHECK(ran == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
}

TEST_CASE("work_queue_destroyed_with_jobs_queued_runs_only_the_started_one", "[comm][queue]") {
  std::atomic<bool> started{false}, release{false};
  std::atomic<int> ran_later{0};
  std::shared_ptr<Work> running, queued;
  {
    WorkQueue queue;
    running = queue.enqueue([&] {
      started = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    queued = queue.enqueue([&] { ++ran_later; });  // its buffers may be gone: must not run
    while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::thread releaser([&] {
      // long enough for the destructor below to have marked the queue stopped, even on a
      // loaded machine
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      release = true;
    });
    releaser.detach();
  }  // joins after the running job
  CHECK(running->done());
  CHECK_NOTHROW(running->wait());
  CHECK_THROWS_WITH(queued->wait(), Contains("closed before this operation ran"));
  CHECK(ran_later == 0);
}
