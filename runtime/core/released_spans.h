#pragma once
// ReleasedSpans: the bookkeeping of a backend that hands the memory of ZeRO's released ranges
// back in whole units (the cuda backend's 2 MiB granules, or host pages when the cpu backend is
// asked to fault on released memory) and takes it back when a range is acquired again.
//
// A unit is dropped only when it lies wholly inside a released range, so a unit that still holds
// any live byte is never dropped; a released range's bytes in units still held are filled
// instead (with the caller's fill value). Acquiring a range takes back every dropped unit it
// touches (whole: the unit's other bytes were released too, and read 0 like the rest).
#include <cstdint>
#include <map>
#include <vector>

namespace trainer {

struct ByteSpan {
  uintptr_t begin = 0, end = 0;
  uintptr_t size() const { return end - begin; }
  bool operator==(const ByteSpan&) const = default;
};

class ReleasedSpans {
 public:
  explicit ReleasedSpans(uintptr_t unit_bytes);

  struct Release {
    std::vector<ByteSpan> drop;  // whole units, newly dropped: hand them back
    std::vector<ByteSpan> fill;  // the rest of the range, in units still held: fill them
  };
  // [a, b) is no longer needed.
  Release release(uintptr_t a, uintptr_t b);
  // [a, b) is needed again: the dropped units it touches, taken back (merged spans of units).
  std::vector<ByteSpan> acquire(uintptr_t a, uintptr_t b);

  uintptr_t unit_bytes() const { return unit_; }
  uintptr_t dropped_bytes() const { return dropped_bytes_; }
  // Bytes of [a, b) in dropped units.
  uintptr_t dropped_within(uintptr_t a, uintptr_t b) const;

 private:
  uintptr_t unit_;
  std::map<uintptr_t, uintptr_t> dropped_;  // begin -> end: disjoint, adjacent ones merged
  uintptr_t dropped_bytes_ = 0;
};

}  // namespace trainer
