#pragma once
// Host page helpers that make ZeRO's "free" real on the cpu backend without moving the model's
// flat buffers: released ranges hand their whole pages back to the kernel (madvise DONTNEED, so
// they read as zero and leave the resident set), and residency is measured with mincore.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "runtime/core/released_spans.h"

namespace trainer::cpu {

// Returns the whole pages inside [a, b) to the kernel (they read as zero bytes afterwards and cost
// no memory until written; zeroed by hand should madvise fail). Returns the page-aligned [pa, pb)
// it covered (pa >= pb: no whole page inside).
std::pair<uintptr_t, uintptr_t> discard_whole_pages(uintptr_t a, uintptr_t b);

// Sets buf[lo, hi) to `fill` where it shares a page with live data, and returns the whole pages
// inside it to the kernel (they read as 0 afterwards). T: float, or uint16_t for bf16 bits.
template <class T>
void release_range(T* buf, int64_t lo, int64_t hi, T fill) {
  if (hi <= lo) return;
  const auto a = reinterpret_cast<uintptr_t>(buf + lo), b = reinterpret_cast<uintptr_t>(buf + hi);
  const auto [pa, pb] = discard_whole_pages(a, b);
  if (pb <= pa) {
    std::fill(buf + lo, buf + hi, fill);
    return;
  }
  std::fill(reinterpret_cast<T*>(a), reinterpret_cast<T*>(pa), fill);
  std::fill(reinterpret_cast<T*>(pb), reinterpret_cast<T*>(b), fill);
}
uintptr_t page_size();
// The whole pages of `s` go back to the kernel and fault on any access (PROT_NONE) ...
void drop_pages(ByteSpan s);
// ... until they are taken back (read and write again; they read 0).
void restore_pages(ByteSpan s);

// Bytes of [p, p+bytes) resident in memory now (whole pages).
int64_t resident_page_bytes(const void* p, size_t bytes);

}  // namespace trainer::cpu
