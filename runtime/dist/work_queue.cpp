#include "runtime/dist/work_queue.h"

namespace trainer::dist {

void QueuedWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool QueuedWork::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void QueuedWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

WorkQueue::WorkQueue() : thread_([this] { run(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Work> WorkQueue::enqueue(std::function<void()> job) {
  auto work = std::make_shared<QueuedWork>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back({std::move(job), work});
  }
  cv_.notify_one();
  return work;
}

void WorkQueue::run() {
  while (true) {
    Item item;
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;  // stop_ and nothing left
      item = std::move(items_.front());
      items_.pop_front();
      if (broken_) {
        error = broken_;
      } else if (stop_) {
        error = std::make_exception_ptr(
            CommError("communicator closed before this operation ran (the rank is exiting)"));
      }
    }
    if (!error) {
      try {
        item.job();
      } catch (...) {
        error = std::current_exception();
        std::lock_guard<std::mutex> lock(mu_);
        broken_ = error;
      }
    }
    item.work->finish(error);
  }
}

}  // namespace trainer::dist
