#pragma once
// WorkQueue: one worker thread running jobs in FIFO order. A communicator owns one so that all of
// its ops, async or blocking, run in the order they were issued, off the caller's thread.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/dist/comm.h"

namespace trainer::dist {

// The Work of one queued job: wait() blocks until it ran and rethrows its exception.
class QueuedWork : public Work {
 public:
  void wait() override;
  bool done() override;
  void finish(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class WorkQueue {
 public:
  WorkQueue();
  ~WorkQueue();  // runs the jobs already queued, then joins
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  std::shared_ptr<Work> enqueue(std::function<void()> job);

 private:
  struct Item {
    std::function<void()> job;
    std::shared_ptr<QueuedWork> work;
  };
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace trainer::dist
