#pragma once
// The TcpStore server: one thread polling a listening socket and its client connections, holding
// the key-value map. get/wait requests whose keys are missing are parked until a set/add makes
// them complete or their deadline passes (then the reply names the missing keys). A connection
// that sends a malformed frame or closes is dropped; the server itself never stops for a peer.
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/store_wire.h"

namespace trainer::dist {

class TcpStoreServer {
 public:
  // Binds 0.0.0.0:port (0 = any free port); throws StoreError naming host:port on failure.
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // Client connections open now (as of the server thread's last pass, at most ~1 s old).
  size_t open_connections() const { return open_.load(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Parked {
    wire::Cmd cmd;
    std::vector<std::string> keys;
    Clock::time_point deadline;
    std::set<std::string> pending;  // keys still missing
  };
  struct Conn {
    int fd = -1;
    std::vector<uint8_t> in, out;
    size_t out_off = 0;  // bytes of `out` already sent
    std::optional<Parked> parked;
    bool dead = false;
    bool resume = false;  // a parked request finished; frames behind it are still to handle
  };

  void run();
  int poll_timeout_ms() const;
  void accept_all();
  void read_from(Conn& c);
  size_t buffered_in() const;
  // Unprocessed request bytes all connections together may hold (one maximal frame).
  static constexpr size_t kMaxBufferedInBytes = wire::kMaxFrameBytes + 4;
  void write_to(Conn& c);
  void process_input(Conn& c);
  void handle(Conn& c, wire::Reader& r);
  bool try_finish(Conn& c, bool expired);
  void wake_parked(const std::string& key);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  void reply(Conn& c, const wire::Writer& w);
  // Unsent reply bytes all connections together may hold (one maximal frame and some).
  static constexpr size_t kMaxPendingOutBytes = size_t{wire::kMaxFrameBytes} + (64u << 20);

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> open_{0};
  std::map<std::string, std::vector<uint8_t>> data_;
  std::vector<std::unique_ptr<Conn>> conns_;
  Clock::time_point accept_paused_until_{};  // after accept() ran out of fds
  std::thread thread_;
};

}  // namespace trainer::dist
