#include "runtime/dist/exit_deadline.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace trainer::dist {

namespace {
std::atomic<bool> g_armed{false};
}  // namespace

void arm_exit_deadline(double seconds, int code, const std::string& why) {
  if (g_armed.exchange(true)) return;
  // Detached: it must outlive whatever the failing thread is blocked in, and std::_Exit runs no
  // destructors (the ones that hang are what it cuts short).
  std::thread([seconds, code, why] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    spdlog::error("{}; tearing down did not finish within {:.0f} s of it: exiting with status {}",
                  why, seconds, code);
    spdlog::default_logger()->flush();
    std::_Exit(code);
  }).detach();
}

bool exit_deadline_armed() {
  return g_armed.load();
}

}  // namespace trainer::dist
