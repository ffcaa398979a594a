#pragma once
// The TcpStore's wire format. Every message is a frame: a u32 body length (little endian) and the
// body. Requests start with a Cmd byte; replies start with a Status byte. Strings and values are a
// u32 length and the bytes; integers are little-endian i64. Anything else is a protocol error and
// the server drops the connection that sent it.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::dist::wire {

enum class Cmd : uint8_t {
  set = 1,
  get = 2,
  add = 3,
  wait = 4,
  check = 5,
  get_existing = 6,
  which_exist = 7
};
enum class Status : uint8_t { ok = 0, timeout = 1 };

// Larger frames are refused, so a peer sending garbage cannot make the server allocate gigabytes.
constexpr uint32_t kMaxFrameBytes = 512u << 20;

struct WireError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Writer {
 public:
  Writer& u8(uint8_t v);
  Writer& u32(uint32_t v);
  Writer& i64(int64_t v);
  Writer& bytes(const void* data, size_t n);
  Writer& str(const std::string& s) { return bytes(s.data(), s.size()); }
  Writer& strs(const std::vector<std::string>& v);
  // The framed message: length prefix + body.
  std::vector<uint8_t> frame() const;

 private:
  std::vector<uint8_t> body_;
};

// Reads a frame body; throws WireError when it is shorter than its fields claim.
class Reader {
 public:
  Reader(const uint8_t* data, size_t n) : p_(data), end_(data + n) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  std::vector<uint8_t> bytes();
  std::string str();
  std::vector<std::string> strs();
  bool at_end() const { return p_ == end_; }

 private:
  void need(size_t n) const;
  const uint8_t* p_;
  const uint8_t* end_;
};

uint32_t decode_u32(const uint8_t* p);

}  // namespace trainer::dist::wire
