#pragma once
// What the operating system says about this process.
#include <cstdint>

namespace trainer::train {

// Peak resident set size (VmHWM) in bytes; 0 where /proc is unavailable.
int64_t peak_rss_bytes();

}  // namespace trainer::train
