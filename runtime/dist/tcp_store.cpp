#include "runtime/dist/tcp_store.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <spdlog/spdlog.h>

#include "runtime/dist/socket_util.h"
#include "runtime/dist/tcp_store_server.h"

namespace trainer::dist {
namespace {

std::string join(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + ("'" + k + "'");
  return s;
}

uint8_t status_byte(wire::Status s) {
  return static_cast<uint8_t>(s);
}

// Reads a reply that answers each key of a request in turn (after its status byte and count).
template <typename ReadAnswer>
void read_answer_per_key(const std::vector<uint8_t>& body, size_t keys, const char* what,
                         ReadAnswer read_answer) {
  wire::Reader r(body.data(), body.size());
  r.u8();
  if (r.u32() != keys) throw StoreError(std::string("TcpStore ") + what + ": bad reply");
  for (size_t i = 0; i < keys; ++i) read_answer(r, i);
}

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, bool is_server,
                   std::chrono::milliseconds timeout)
    : host_(host), port_(port), timeout_(timeout) {
  if (is_server) {
    server_ = std::make_unique<TcpStoreServer>(host, port);
    port_ = server_->port();
  }
  release(connect_with_backoff(false));  // fail early when the server is unreachable
}

TcpStore::~TcpStore() {
  if (!keep_open_)  // (after a client's linger: the kernel closes them as the process exits)
    for (int fd : idle_) net::close_fd(fd);
}

int TcpStore::connect_with_backoff(bool server_was_up) {
  const auto start = std::chrono::steady_clock::now();
  auto deadline = start + timeout();
  // A name that does not resolve is a misspelt MASTER_ADDR, or a DNS record that is not there yet
  // (a Kubernetes service's, as the job starts): said at once, retried for at most a minute.
  const auto unknown_host_deadline =
      start + std::min<std::chrono::steady_clock::duration>(timeout(), std::chrono::seconds(60));
  std::string unknown_host_error;  // while the name does not resolve (said once)
  auto delay = std::chrono::milliseconds(10);
  std::string error;
  while (true) {
    bool unknown_host = false;
    // (an attempt ends by the deadline too: a host that drops SYNs answers nothing)
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    int fd = net::connect_tcp(host_, port_, &error, &unknown_host,
                              std::max(left, std::chrono::milliseconds(1)));
    if (fd >= 0) return fd;
    if (unknown_host) {
      if (unknown_host_error.empty()) {
        unknown_host_error = "TcpStore: cannot resolve the store's host '" + host_ +
                             "' (MASTER_ADDR, or trainer launch --master-addr): " +
                             error.substr(error.find(": ") + 2);  // (after "cannot resolve host")
        spdlog::warn("{}; retrying for up to {} s", unknown_host_error,
                     std::chrono::duration_cast<std::chrono::seconds>(unknown_host_deadline - start)
                         .count());
      }
      if (std::chrono::steady_clock::now() >= unknown_host_deadline) break;
    } else {
      unknown_host_error.clear();
    }
    // Once this store has connected, a refusal means the serving process is gone (several of
    // this rank's communicators naming a failure at once each need a connection): say so now,
    // not after the timeout.
    if (server_was_up && error == std::strerror(ECONNREFUSED)) {
      std::lock_guard<std::mutex> lock(mu_);
      lost_ = "TcpStore: connection to " + host_ + ":" + std::to_string(port_) +
              " refused (server gone)";
      throw StoreLost(lost_);
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(delay, deadline - now));
    delay = std::min(delay * 2, std::chrono::milliseconds(1000));
  }
  if (!unknown_host_error.empty()) throw StoreError(unknown_host_error);
  throw StoreTimeout("TcpStore: could not connect to " + host_ + ":" + std::to_string(port_) +
                     " within " + std::to_string(timeout().count()) + " ms (" + error + ")");
}

int TcpStore::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lost_.empty()) throw StoreLost(lost_);
    if (!idle_.empty()) {
      int fd = idle_.back();
      idle_.pop_back();
      return fd;
    }
  }
  return connect_with_backoff(true);
}

void TcpStore::release(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(fd);
}

std::vector<uint8_t> TcpStore::call(const wire::Writer& request, bool blocking) {
  int fd = acquire();
  // The server answers a blocked get/wait by its deadline, and anything else at once; the
  // margins only guard against a hung server (rank 0 stopped), and bound how long the others
  // wait past their timeout to say so.
  const double timeout_s = static_cast<double>(timeout().count()) / 1000.0;
  const double margin_s = std::clamp(timeout_s / 2, 2.0, 30.0);
  net::set_recv_timeout(fd, blocking ? timeout_s + margin_s : std::clamp(timeout_s, 1.0, 30.0));
  auto frame = request.frame();
  uint8_t len_bytes[4];
  std::vector<uint8_t> body;
  bool ok = net::write_all(fd, frame.data(), frame.size()) && net::read_exact(fd, len_bytes, 4);
  if (ok) {
    uint32_t len = wire::decode_u32(len_bytes);
    ok = len > 0 && len <= wire::kMaxFrameBytes;
    if (ok) body.resize(len);
    ok = ok && net::read_exact(fd, body.data(), len);
  }
  if (!ok) {
    net::close_fd(fd);
    const std::string why = "TcpStore: connection to " + host_ + ":" + std::to_string(port_) +
                            " lost (server gone, hung or reply malformed)";
    std::lock_guard<std::mutex> lock(mu_);
    lost_ = why;
    throw StoreLost(why);
  }
  release(fd);
  return body;
}

void TcpStore::throw_timeout(const char* what, const std::vector<std::string>& keys) const {
  throw StoreTimeout(std::string("TcpStore ") + what + ": timed out after " +
                     std::to_string(timeout().count()) + " ms waiting for key(s) " + join(keys) +
                     " at " + host_ + ":" + std::to_string(port_));
}

void TcpStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  auto body = call(wire::Writer()
                       .u8(static_cast<uint8_t>(wire::Cmd::set))
                       .str(key)
                       .bytes(value.data(), value.size()));
  if (body.empty() || body[0] != status_byte(wire::Status::ok))
    throw StoreError("TcpStore set: bad reply");
}

std::vector<uint8_t> TcpStore::get(const std::string& key) {
  auto body =
      call(wire::Writer().u8(static_cast<uint8_t>(wire::Cmd::get)).str(key).i64(timeout().count()),
           true);
  wire::Reader r(body.data(), body.size());
  auto status = r.u8();
  if (status == status_byte(wire::Status::timeout)) throw_timeout("get", r.strs());
  return r.bytes();
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  auto body = call(wire::Writer().u8(static_cast<uint8_t>(wire::Cmd::add)).str(key).i64(delta));
  wire::Reader r(body.data(), body.size());
  r.u8();
  return r.i64();
}

void TcpStore::wait(const std::vector<std::string>& keys) {
  auto body = call(
      wire::Writer().u8(static_cast<uint8_t>(wire::Cmd::wait)).strs(keys).i64(timeout().count()),
      true);
  wire::Reader r(body.data(), body.size());
  if (r.u8() == status_byte(wire::Status::timeout)) throw_timeout("wait", r.strs());
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  auto body = call(wire::Writer().u8(static_cast<uint8_t>(wire::Cmd::check)).strs(keys));
  wire::Reader r(body.data(), body.size());
  r.u8();
  return r.u8() != 0;
}

std::vector<MaybeValue> TcpStore::get_existing(const std::vector<std::string>& keys) {
  auto body = call(wire::Writer().u8(static_cast<uint8_t>(wire::Cmd::get_existing)).strs(keys));
  std::vector<MaybeValue> out(keys.size());
  read_answer_per_key(body, keys.size(), "get_existing", [&](wire::Reader& r, size_t i) {
    if (r.u8() != 0) out[i] = r.bytes();
  });
  return out;
}

std::vector<bool> TcpStore::which_exist(const std::vector<std::string>& keys) {
  auto body = call(wire::Writer().u8(static_cast<uint8_t>(wire::Cmd::which_exist)).strs(keys));
  std::vector<bool> out(keys.size());
  read_answer_per_key(body, keys.size(), "which_exist",
                      [&](wire::Reader& r, size_t i) { out[i] = r.u8() != 0; });
  return out;
}

void TcpStore::set_timeout(std::chrono::milliseconds t) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_ = t;
}

std::chrono::milliseconds TcpStore::timeout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeout_;
}

void TcpStore::linger(std::chrono::milliseconds max) {
  if (!server_) {
    std::lock_guard<std::mutex> lock(mu_);
    keep_open_ = true;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : idle_) net::close_fd(fd);  // this process's own connections
    idle_.clear();
    lost_ = "TcpStore: closed (the serving process is exiting)";
  }
  // A hung rank's connections never close: give up once none has closed for `max`. A failure
  // that travels round a Gloo ring (each rank learns of it when its neighbour exits) closes them
  // one after another, for longer than `max`; 4 x max bounds that.
  const auto start = std::chrono::steady_clock::now();
  auto quiet_until = start + max;
  size_t open = server_->open_connections();
  bool told = false;
  while (open > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto now = std::chrono::steady_clock::now();
    const size_t still_open = server_->open_connections();
    if (still_open < open) quiet_until = now + max;
    open = still_open;
    if (now >= quiet_until || now >= start + 4 * max) break;
    if (!told && now > start + std::chrono::milliseconds(500)) {
      spdlog::info(
          "keeping the rendezvous store up for the other ranks while they leave (up to {:.1f} s "
          "after the last one left, {:.1f} s in all): they read there which rank failed",
          std::chrono::duration<double>(max).count(),
          std::chrono::duration<double>(4 * max).count());
      told = true;
    }
  }
}

std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, bool is_server,
                                      std::chrono::milliseconds timeout) {
  return std::make_shared<TcpStore>(host, port, is_server, timeout);
}

}  // namespace trainer::dist
