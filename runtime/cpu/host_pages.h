#pragma once
// Host page helpers that make ZeRO's "free" real on the cpu backend without moving the model's
// flat buffers: released ranges hand their whole pages back to the kernel (madvise DONTNEED, so
// they read as zero and leave the resident set), and residency is measured with mincore.
#include <cstddef>
#include <cstdint>

namespace trainer::cpu {

// Sets buf[lo, hi) to `fill` where it shares a page with live data, and returns the whole pages
// inside it to the kernel (they read as 0.0f afterwards and cost no memory until written).
void release_range(float* buf, int64_t lo, int64_t hi, float fill);
// Bytes of [p, p+bytes) resident in memory now (whole pages).
int64_t resident_page_bytes(const void* p, size_t bytes);

}  // namespace trainer::cpu
