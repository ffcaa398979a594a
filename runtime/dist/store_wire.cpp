#include "runtime/dist/store_wire.h"

#include <cstring>

namespace trainer::dist::wire {

Writer& Writer::u8(uint8_t v) {
  body_.push_back(v);
  return *this;
}

Writer& Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) body_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

Writer& Writer::i64(int64_t v) {
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) body_.push_back(static_cast<uint8_t>(u >> (8 * i)));
  return *this;
}

Writer& Writer::bytes(const void* data, size_t n) {
  u32(static_cast<uint32_t>(n));
  auto* p = static_cast<const uint8_t*>(data);
  body_.insert(body_.end(), p, p + n);
  return *this;
}

Writer& Writer::strs(const std::vector<std::string>& v) {
  u32(static_cast<uint32_t>(v.size()));
  for (const auto& s : v) str(s);
  return *this;
}

std::vector<uint8_t> Writer::frame() const {
  Writer out;
  out.u32(static_cast<uint32_t>(body_.size()));
  out.body_.insert(out.body_.end(), body_.begin(), body_.end());
  return out.body_;
}

uint32_t decode_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

void Reader::need(size_t n) const {
  if (static_cast<size_t>(end_ - p_) < n) throw WireError("truncated store message");
}

uint8_t Reader::u8() {
  need(1);
  return *p_++;
}

uint32_t Reader::u32() {
  need(4);
  uint32_t v = decode_u32(p_);
  p_ += 4;
  return v;
}

int64_t Reader::i64() {
  need(8);
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(p_[i]) << (8 * i);
  p_ += 8;
  return static_cast<int64_t>(u);
}

std::vector<uint8_t> Reader::bytes() {
  uint32_t n = u32();
  need(n);
  std::vector<uint8_t> v(p_, p_ + n);
  p_ += n;
  return v;
}

std::string Reader::str() {
  auto v = bytes();
  return std::string(v.begin(), v.end());
}

std::vector<std::string> Reader::strs() {
  uint32_t n = u32();
  need(n);  // each string takes at least one byte; refuses absurd counts early
  std::vector<std::string> v;
  for (uint32_t i = 0; i < n; ++i) v.push_back(str());
  return v;
}

}  // namespace trainer::dist::wire
