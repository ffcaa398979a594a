#include "runtime/dist/tcp_store_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "runtime/dist/socket_util.h"
#include "runtime/dist/store.h"

namespace trainer::dist {
namespace {

int64_t parse_int(const std::vector<uint8_t>& v) {
  size_t used = 0;
  std::string s(v.begin(), v.end());
  int64_t x = std::stoll(s, &used);
  if (used != s.size()) throw std::invalid_argument("store add: value is not an integer");
  return x;
}

}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& host, int port) {
  listen_fd_ = net::listen_tcp(host, port, &port_);
  if (::pipe(wake_pipe_) != 0) {
    net::close_fd(listen_fd_);
    throw StoreError("TcpStore: pipe() failed");
  }
  net::set_nonblocking(listen_fd_);
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::~TcpStoreServer() {
  stop_ = true;
  char b = 1;
  [[maybe_unused]] ssize_t k = ::write(wake_pipe_[1], &b, 1);
  thread_.join();
  for (auto& c : conns_) net::close_fd(c->fd);
  net::close_fd(listen_fd_);
  net::close_fd(wake_pipe_[0]);
  net::close_fd(wake_pipe_[1]);
}

void TcpStoreServer::run() {
  while (!stop_) {
    // (not the listening socket for a while after accept ran out of fds: it stays readable)
    const bool accepting = Clock::now() >= accept_paused_until_;
    std::vector<pollfd> fds = {{wake_pipe_[0], POLLIN, 0},
                               {listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0}};
    for (auto& c : conns_) {
      short events = c->parked ? 0 : POLLIN;  // a parked request is answered before the next
      if (!c->out.empty()) events |= POLLOUT;
      fds.push_back({c->fd, events, 0});
    }
    int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (n < 0 && errno != EINTR) break;
    if (stop_) break;
    if (fds[1].revents & POLLIN) accept_all();
    for (size_t i = 0; i < conns_.size() && i + 2 < fds.size(); ++i) {
      Conn& c = *conns_[i];
      short re = fds[i + 2].revents;
      if (re & (POLLERR | POLLNVAL)) c.dead = true;
      if (!c.dead && (re & (POLLIN | POLLHUP))) read_from(c);
      if (!c.dead && (re & POLLOUT)) write_to(c);
    }
    for (auto& c : conns_)
      if (c->parked && !c->dead && Clock::now() >= c->parked->deadline) try_finish(*c, true);
    for (size_t i = 0; i < conns_.size(); ++i) {  // requests queued behind a finished one
      Conn& c = *conns_[i];
      if (c.resume && !c.dead && !c.parked) process_input(c);
    }
    for (auto& c : conns_)
      if (!c->dead && !c->out.empty()) write_to(*c);
    auto dead = std::remove_if(conns_.begin(), conns_.end(), [this](auto& c) {
      if (!c->dead) return false;
      net::close_fd(c->fd);
      return true;
    });
    conns_.erase(dead, conns_.end());
    open_ = conns_.size();
  }
}

int TcpStoreServer::poll_timeout_ms() const {
  auto now = Clock::now();
  int64_t best = 1000;
  if (now < accept_paused_until_)  // (the listening socket is polled again when the pause ends)
    best =
        std::chrono::duration_cast<std::chrono::milliseconds>(accept_paused_until_ - now).count() +
        1;
  for (auto& c : conns_) {
    if (c->resume && !c->parked) return 0;
    if (!c->parked) continue;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c->parked->deadline - now);
    best = std::min<int64_t>(best, std::max<int64_t>(0, ms.count() + 1));
  }
  return static_cast<int>(best);
}

void TcpStoreServer::accept_all() {
  while (true) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of fds (or memory): the connection waits in the backlog; polling the listening
      // socket again at once would spin a core until an fd frees.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    net::set_nodelay(fd);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    conns_.push_back(std::move(c));
  }
}

void TcpStoreServer::read_from(Conn& c) {
  uint8_t buf[65536];
  while (true) {
    ssize_t k = ::recv(c.fd, buf, sizeof(buf), 0);
    if (k > 0) {
      c.in.insert(c.in.end(), buf, buf + k);
      // Refuse a bad length as soon as it arrives (not after reading all the peer sent), and bound
      // what all connections together may hold unprocessed: kMaxFrameBytes is per frame, and each
      // connection could otherwise park a 512 MiB partial frame.
      if (c.in.size() >= 4) {
        const uint32_t len = wire::decode_u32(c.in.data());
        if (len == 0 || len > wire::kMaxFrameBytes) {
          c.dead = true;
          return;
        }
      }
      if (buffered_in() > kMaxBufferedInBytes) {
        c.dead = true;  // the connection that pushes the total over the budget is dropped
        return;
      }
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (k < 0 && errno == EINTR) continue;
    c.dead = true;  // closed by the peer or failed
    return;
  }
  process_input(c);
}

size_t TcpStoreServer::buffered_in() const {
  size_t n = 0;
  for (const auto& c : conns_)
    if (!c->dead) n += c->in.size();
  return n;
}

void TcpStoreServer::write_to(Conn& c) {
  while (c.out_off < c.out.size()) {
    ssize_t k = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      c.dead = true;
      return;
    }
    c.out_off += static_cast<size_t>(k);  // (erasing the front each send is quadratic)
  }
  c.out.clear();
  c.out_off = 0;
}

// Handles every complete frame in c.in, stopping at a parked request.
void TcpStoreServer::process_input(Conn& c) {
  c.resume = false;
  size_t pos = 0;
  while (!c.dead && !c.parked && c.in.size() - pos >= 4) {
    uint32_t len = wire::decode_u32(c.in.data() + pos);
    if (len == 0 || len > wire::kMaxFrameBytes) {
      c.dead = true;
      break;
    }
    if (c.in.size() - pos - 4 < len) break;
    wire::Reader r(c.in.data() + pos + 4, len);
    try {
      handle(c, r);
      if (!r.at_end()) c.dead = true;  // trailing bytes: not our protocol
    } catch (const std::exception&) {  // malformed frame, or add on a non-number
      c.dead = true;
    }
    pos += 4 + len;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(pos));
  write_to(c);
}

void TcpStoreServer::handle(Conn& c, wire::Reader& r) {
  auto cmd = static_cast<wire::Cmd>(r.u8());
  switch (cmd) {
    case wire::Cmd::set: {
      std::string key = r.str();
      data_[key] = r.bytes();
      reply(c, wire::Writer().u8(static_cast<uint8_t>(wire::Status::ok)));
      wake_parked(key);
      return;
    }
    case wire::Cmd::add: {
      std::string key = r.str();
      int64_t delta = r.i64();
      auto it = data_.find(key);
      int64_t v = it == data_.end() ? 0 : parse_int(it->second);
      std::string s = std::to_string(v + delta);
      data_[key] = std::vector<uint8_t>(s.begin(), s.end());
      reply(c, wire::Writer().u8(static_cast<uint8_t>(wire::Status::ok)).i64(v + delta));
      wake_parked(key);
      return;
    }
    case wire::Cmd::check: {
      bool all = missing(r.strs()).empty();
      reply(c, wire::Writer().u8(static_cast<uint8_t>(wire::Status::ok)).u8(all ? 1 : 0));
      return;
    }
    case wire::Cmd::get_existing: {
      const std::vector<std::string> keys = r.strs();
      wire::Writer w;
      w.u8(static_cast<uint8_t>(wire::Status::ok)).u32(static_cast<uint32_t>(keys.size()));
      for (const auto& k : keys) {
        auto it = data_.find(k);
        w.u8(it == data_.end() ? 0 : 1);
        if (it != data_.end()) w.bytes(it->second.data(), it->second.size());
      }
      reply(c, w);
      return;
    }
    case wire::Cmd::which_exist: {
      const std::vector<std::string> keys = r.strs();
      wire::Writer w;
      w.u8(static_cast<uint8_t>(wire::Status::ok)).u32(static_cast<uint32_t>(keys.size()));
      for (const auto& k : keys) w.u8(data_.count(k) ? 1 : 0);
      reply(c, w);
      return;
    }
    case wire::Cmd::get:
    case wire::Cmd::wait: {
      auto keys = cmd == wire::Cmd::get ? std::vector<std::string>{r.str()} : r.strs();
      int64_t timeout_ms = std::max<int64_t>(0, r.i64());
      c.parked =
          Parked{cmd, std::move(keys), Clock::now() + std::chrono::milliseconds(timeout_ms), {}};
      for (const auto& k : c.parked->keys)
        if (!data_.count(k)) c.parked->pending.insert(k);
      try_finish(c, false);
      return;
    }
  }
  throw wire::WireError("unknown store command");
}

// Answers a parked get/wait when its keys exist, or with a timeout when `expired`.
bool TcpStoreServer::try_finish(Conn& c, bool expired) {
  if (!c.parked->pending.empty() && !expired) return false;
  auto miss = missing(c.parked->keys);
  wire::Writer w;
  if (!miss.empty()) {
    w.u8(static_cast<uint8_t>(wire::Status::timeout)).strs(miss);
  } else {
    w.u8(static_cast<uint8_t>(wire::Status::ok));
    if (c.parked->cmd == wire::Cmd::get) {
      const auto& v = data_.at(c.parked->keys[0]);
      w.bytes(v.data(), v.size());
    }
  }
  c.parked.reset();
  c.resume = true;  // the run loop handles requests that arrived behind this one
  reply(c, w);
  return true;
}

// O(log keys) per parked request, not a scan of every parked key list on every set/add.
void TcpStoreServer::wake_parked(const std::string& key) {
  for (auto& c : conns_)
    if (c->parked && !c->dead && c->parked->pending.erase(key) && c->parked->pending.empty())
      try_finish(*c, false);
}

std::vector<std::string> TcpStoreServer::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!data_.count(k)) out.push_back(k);
  return out;
}

void TcpStoreServer::reply(Conn& c, const wire::Writer& w) {
  auto f = w.frame();
  // A peer that pipelines requests without reading the replies (an 18-byte get can ask for a
  // 512 MiB value) is dropped once the replies all connections hold exceed the budget.
  size_t pending = f.size();
  for (const auto& o : conns_)
    if (!o->dead) pending += o->out.size() - o->out_off;
  if (pending > kMaxPendingOutBytes) {
    c.dead = true;
    return;
  }
  c.out.insert(c.out.end(), f.begin(), f.end());
}

}  // namespace trainer::dist
