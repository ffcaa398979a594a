#include "runtime/core/released_spans.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace trainer {

ReleasedSpans::ReleasedSpans(uintptr_t unit_bytes) : unit_(unit_bytes) {
  TRAINER_CHECK(unit_ > 0, "ReleasedSpans: unit of 0 bytes");
}

uintptr_t ReleasedSpans::dropped_within(uintptr_t a, uintptr_t b) const {
  uintptr_t bytes = 0;
  auto it = dropped_.upper_bound(a);
  if (it != dropped_.begin()) --it;
  for (; it != dropped_.end() && it->first < b; ++it) {
    const uintptr_t lo = std::max(a, it->first), hi = std::min(b, it->second);
    if (hi > lo) bytes += hi - lo;
  }
  return bytes;
}

ReleasedSpans::Release ReleasedSpans::release(uintptr_t a, uintptr_t b) {
  Release out;
  if (b <= a) return out;
  const uintptr_t ua = (a + unit_ - 1) / unit_ * unit_, ub = b / unit_ * unit_;
  // The dropped spans that meet [a, b) (sorted), walked to find the gaps between them.
  std::vector<ByteSpan> held;  // the parts of [a, b) not in dropped units
  uintptr_t at = a;
  auto it = dropped_.upper_bound(a);
  if (it != dropped_.begin()) --it;
  for (; it != dropped_.end() && it->first < b; ++it) {
    if (it->second <= at) continue;
    if (it->first > at) held.push_back({at, it->first});
    at = std::max(at, it->second);
  }
  if (at < b) held.push_back({at, b});
  for (const ByteSpan& h : held) {
    // the whole units of this gap inside [ua, ub) are dropped; the rest is filled
    const uintptr_t da = std::max(h.begin, ua), db = std::min(h.end, ub);
    if (db > da) {
      out.drop.push_back({da, db});
      if (h.begin < da) out.fill.push_back({h.begin, da});
      if (db < h.end) out.fill.push_back({db, h.end});
    } else {
      out.fill.push_back(h);
    }
  }
  for (const ByteSpan& d : out.drop) {
    dropped_bytes_ += d.size();
    uintptr_t lo = d.begin, hi = d.end;
    // merge with the neighbours that touch it
    auto next = dropped_.lower_bound(lo);
    if (next != dropped_.end() && next->first == hi) {
      hi = next->second;
      next = dropped_.erase(next);
    }
    if (next != dropped_.begin()) {
      auto prev = std::prev(next);
      if (prev->second == lo) {
        lo = prev->first;
        dropped_.erase(prev);
      }
    }
    dropped_[lo] = hi;
  }
  return out;
}

std::vector<ByteSpan> ReleasedSpans::acquire(uintptr_t a, uintptr_t b) {
  std::vector<ByteSpan> out;
  if (b <= a) return out;
  const uintptr_t ua = a / unit_ * unit_, ub = (b + unit_ - 1) / unit_ * unit_;
  auto it = dropped_.upper_bound(ua);
  if (it != dropped_.begin()) --it;
  while (it != dropped_.end() && it->first < ub) {
    const uintptr_t lo = std::max(ua, it->first), hi = std::min(ub, it->second);
    if (hi <= lo) {
      ++it;
      continue;
    }
    out.push_back({lo, hi});
    dropped_bytes_ -= hi - lo;
    const uintptr_t begin = it->first, end = it->second;
    it = dropped_.erase(it);
    if (begin < lo) dropped_[begin] = lo;
    if (hi < end) it = dropped_.emplace(hi, end).first;  // past [ua, ub): the loop ends
  }
  return out;
}

}  // namespace trainer
