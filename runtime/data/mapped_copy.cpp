#include "runtime/data/mapped_copy.h"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <mutex>

namespace trainer::data {
namespace {

// (volatile, and fenced in the copy: the compiler must keep the stores around the loop, which
// nothing in it appears to read)
thread_local sigjmp_buf* volatile t_copy_jump = nullptr;
thread_local const volatile char* volatile t_copy_begin = nullptr;  // the mapped bytes read
thread_local const volatile char* volatile t_copy_end = nullptr;
thread_local volatile int t_copy_code = 0;
struct sigaction g_previous {};

extern "C" void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto* at = static_cast<const char*>(info->si_addr);
  // a fault of a copy's read (not a kill, not its writes)
  if (t_copy_jump != nullptr && info->si_code > 0 && at >= t_copy_begin && at < t_copy_end) {
    t_copy_code = info->si_code;
    siglongjmp(*t_copy_jump, 1);
  }
  // Not ours: to the handler before ours. A fault returns and faults again under it (the default
  // action dumps core at the real address); a sent signal is sent again.
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  ::sigaction(SIGBUS, &g_previous, nullptr);
  if (info->si_code <= 0) std::raise(sig);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
}

}  // namespace

int copy_from_mapping(const uint16_t* src, int64_t n, int32_t* out) {
  install_handler();
  sigjmp_buf jump;
  if (sigsetjmp(jump, /*savemask=*/1) != 0) {  // (the mask: SIGBUS is blocked in the handler)
    t_copy_jump = nullptr;
    return t_copy_code;
  }
  t_copy_begin = reinterpret_cast<const char*>(src);
  t_copy_end = reinterpret_cast<const char*>(src + n);
  t_copy_jump = &jump;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  for (int64_t i = 0; i < n; ++i) out[i] = src[i];
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_copy_jump = nullptr;
  return 0;
}

}  // namespace trainer::data
