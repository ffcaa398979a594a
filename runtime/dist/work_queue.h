#pragma once
// WorkQueue: one worker thread running jobs in FIFO order. A communicator owns one so that all of
// its ops, async or blocking, run in the order they were issued, off the caller's thread.
// A job that throws breaks the queue, as a failed collective breaks its communicator: the jobs
// after it are not run but finish at once with the first job's error (otherwise each queued
// gradient bucket would wait out the timeout again before the rank could exit).
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
  // Lets the running job finish, then joins. Jobs not yet started are not run (they finish with an
  // error): on the error paths that leave them, the buffers they name may be gone already.
  ~WorkQueue();
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
  std::exception_ptr broken_;  // the first job's error; every later job finishes with it
  std::thread thread_;
};

}  // namespace trainer::dist
