#include "runtime/dist/gloo_comm.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "runtime/core/host_name.h"
#include "runtime/dist/failure_report.h"
#include "runtime/dist/gloo_store_adapter.h"
#include "runtime/dist/launch_env.h"
#include "runtime/dist/prefix_store.h"

namespace trainer::dist {
namespace {

// Gloo's tcp pairs write with writev, which raises SIGPIPE when the peer's end is gone, and its
// default action ends this rank silently (exit 141) before Gloo can throw the EPIPE that names
// the peer (seen in tests/dist/rank_failure_ends_the_group_naming_the_rank.sh when a rank was
// killed while another wrote to it). Ignored from the first connect, unless a handler is set.
void ignore_sigpipe_from_peers() {
  struct sigaction current {};
  ::sigaction(SIGPIPE, nullptr, &current);
  if (current.sa_handler != SIG_DFL) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, nullptr);
}

bool is_loopback(const std::string& host) {
  return host.empty() || host == "localhost" || host.rfind("127.", 0) == 0;
}

// Whether `iface` holds an IPv4 or IPv6 address: Gloo's lookupAddrForIface needs one.
bool has_ip_address(const std::string& iface) {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return true;  // (let Gloo report it)
  bool found = false;
  for (const ifaddrs* a = all; a != nullptr && !found; a = a->ifa_next)
    found = a->ifa_addr != nullptr && iface == a->ifa_name &&
            (a->ifa_addr->sa_family == AF_INET || a->ifa_addr->sa_family == AF_INET6);
  ::freeifaddrs(all);
  return found;
}

// Whether one of `addrs` can be bound here, as Gloo's lookupAddrForHostname requires.
bool binds_any(const addrinfo* addrs) {
  for (const addrinfo* a = addrs; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd == -1) continue;
    const bool bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
    if (bound) return true;
  }
  return false;
}

// The interface gloo listens on: GLOO_SOCKET_IFNAME or TRAINER_GLOO_HOST when set; loopback for
// a single-node run (MASTER_ADDR local or unset); otherwise this machine's hostname.
gloo::transport::tcp::attr device_attr() {
  gloo::transport::tcp::attr attr;
  const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
  const char* host = std::getenv("TRAINER_GLOO_HOST");
  const char* master = std::getenv("MASTER_ADDR");
  if (iface && *iface) {
    attr.iface = iface;
  } else if (host && *host) {
    attr.hostname = host;
  } else if (is_loopback(master ? master : "")) {
    attr.hostname = "127.0.0.1";
  } else {
    attr.hostname = host_name();
  }
  // Gloo's CreateDevice dereferences an uninitialized addrinfo when getaddrinfo fails with
  // anything but -1 (EAI_NONAME is -2: SIGSEGV), and reports a missing interface as a connect
  // failure: check both here, as bad launch variables (exit 2).
  if (!attr.iface.empty()) {
    if (::if_nametoindex(attr.iface.c_str()) == 0)
      throw LaunchEnvError("GLOO_SOCKET_IFNAME = \"" + attr.iface +
                           "\": no such network interface on this machine");
    if (!has_ip_address(attr.iface))
      throw LaunchEnvError("GLOO_SOCKET_IFNAME = \"" + attr.iface +
                           "\": the interface has no IPv4 or IPv6 address (down or unconfigured)");
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    const int rv = ::getaddrinfo(attr.hostname.c_str(), nullptr, &hints, &result);
    // (the variable, or where the host name came from)
    const std::string what =
        (host && *host)
            ? "TRAINER_GLOO_HOST = \"" + attr.hostname + "\""
            : "this machine's host name \"" + attr.hostname +
                  "\" (where Gloo listens when MASTER_ADDR = " + std::string(master ? master : "") +
                  " is not a loopback address)";
    if (rv != 0)
      throw LaunchEnvError(what + ": does not resolve (" + ::gai_strerror(rv) +
                           "); set GLOO_SOCKET_IFNAME (an interface) or TRAINER_GLOO_HOST (an "
                           "address) to where this node's ranks listen");
    const bool local = binds_any(result);
    ::freeaddrinfo(result);
    if (!local)
      throw LaunchEnvError(what +
                           ": resolves to no address of this machine (Gloo cannot listen there); "
                           "set GLOO_SOCKET_IFNAME or TRAINER_GLOO_HOST to this node's address");
  }
  return attr;
}

bool looks_like_timeout(const std::string& what) {
  return what.find("Timed out") != std::string::npos ||
         what.find("timed out") != std::string::npos ||
         what.find("Connect timeout") != std::string::npos;
}

// The "op" whose arrival marks name the ranks missing from a failed connect (failure_report.h):
// a number no real op reaches.
constexpr uint64_t kConnectOp = ~uint64_t{0};

}  // namespace

GlooComm::GlooComm(std::shared_ptr<Store> store, int rank, int size, const CommOptions& opts)
    : store_(std::move(store)),
      root_store_(root_store(store_)),
      rank_(rank),
      size_(size),
      opts_(opts) {
  if (size < 1 || rank < 0 || rank >= size)
    throw CommError("comm '" + opts_.name + "': rank " + std::to_string(rank) + " of size " +
                    std::to_string(size) + " is out of range");
  if (!opts_.global_ranks.empty() && static_cast<int>(opts_.global_ranks.size()) != size)
    throw CommError("comm '" + opts_.name + "': global_ranks has " +
                    std::to_string(opts_.global_ranks.size()) + " entries for size " +
                    std::to_string(size));
  if (size > 1) connect();
  queue_ = std::make_unique<WorkQueue>();
}

GlooComm::~GlooComm() {
  queue_.reset();
}

int GlooComm::global_rank(int group_rank) const {
  return opts_.global_ranks.empty() ? group_rank
                                    : opts_.global_ranks.at(static_cast<size_t>(group_rank));
}

std::chrono::milliseconds GlooComm::timeout() const {
  return std::chrono::milliseconds(static_cast<int64_t>(opts_.timeout_s * 1000.0));
}

void GlooComm::connect() {
  ignore_sigpipe_from_peers();
  const gloo::transport::tcp::attr attr =
      device_attr();  // bad variables: exit 2, not a peer's fault
  try {
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    // Gloo waits 5 x the context's timeout for a pair's first connect (tcp/pair.h), and gives
    // each pair that timeout for good. A peer hung (alive, silent) while the group connects
    // would hold the others for 5 timeouts: a fifth makes it one. The pairs' own timeout is
    // used by nothing else here: every op passes its timeout explicitly (gloo_ops.cpp).
    ctx->setTimeout(std::max(std::chrono::milliseconds(1), timeout() / 5));
    GlooStoreAdapter adapter(store_);
    ctx->connectFullMesh(adapter, dev);
    ctx->setTimeout(timeout());
    ctx_ = ctx;
    std::vector<std::string> addrs(static_cast<size_t>(size_));
    for (int j = 0; j < size_; ++j)
      if (j != rank_) addrs[static_cast<size_t>(j)] = ctx_->getPair(j)->address().str();
    publish_pair_addresses(*store_, rank_, addrs);
  } catch (const std::exception& e) {
    const std::string who = who_failed_to_connect(e.what());
    throw CommError("comm '" + opts_.name + "' (global rank " + std::to_string(global_rank(rank_)) +
                    "): connecting failed" + (who.empty() ? "" : "; " + who) + " [" + e.what() +
                    "]");
  }
}

// connectFullMesh publishes rank j's host as "rank_<j>", then its addresses as "<j>": a member
// without both died or hung before it published. When all published, one died or hung while the
// pairs connected: the live members all fail too (each has a pair with it), and the one that
// marks no arrival is it (name_failed_ranks).
std::string GlooComm::who_failed_to_connect(const std::string& cause) {
  std::vector<int> missing;
  try {
    const std::string prefix = GlooStoreAdapter::kPrefix;
    std::vector<std::string> keys;  // both keys of every member: one request
    for (int j = 0; j < size_; ++j) {
      keys.push_back(prefix + "rank_" + std::to_string(j));
      keys.push_back(prefix + std::to_string(j));
    }
    const std::vector<bool> published = store_->which_exist(keys);
    for (int j = 0; j < size_; ++j) {
      const size_t at = 2 * static_cast<size_t>(j);
      if (j != rank_ && !(published[at] && published[at + 1])) missing.push_back(global_rank(j));
    }
  } catch (const std::exception& e) {
    return cannot_name(e);
  }
  // (one that did not arrive may be connecting another group, with a rank that hung)
  if (!missing.empty()) return name_missing_ranks(failure_scope(), missing);
  return name_failed_ranks(failure_scope(), OpId::collective(kConnectOp), cause,
                           looks_like_timeout(cause));
}

std::shared_ptr<Work> GlooComm::submit(const char* op, std::function<void()> body) {
  return queue_->enqueue(
      [this, op, body = std::move(body)] { run(op, ops_.next_collective(), body); });
}

std::shared_ptr<Work> GlooComm::submit_transfer(const char* op, std::vector<int> peers,
                                                std::function<void()> body) {
  return queue_->enqueue([this, op, peers = std::move(peers), body = std::move(body)] {
    run(op, ops_.next_transfer(peers), body);
  });
}

void GlooComm::run(const char* op, OpId id, const std::function<void()>& body) {
  waiting_on_ = -1;
  try {
    body();
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    if (id.p2p && waiting_on_ >= 0) id.peers = {waiting_on_};
    fail(op, id, e.what(), looks_like_timeout(e.what()));
  }
}

FailureScope GlooComm::failure_scope() {
  return {store_.get(),   root_store_.get(), rank_, size_, [this](int j) { return global_rank(j); },
          opts_.timeout_s};
}

void GlooComm::fail(const char* op, const OpId& id, const std::string& cause, bool timed_out) {
  FailureScope scope = failure_scope();
  // On the worker thread, the context's only user; the queue runs no op after a failure.
  scope.release_peers = [this] { ctx_.reset(); };
  std::string who = size_ > 1 ? name_failed_ranks(scope, id, cause, timed_out) : "";
  throw CommError("comm '" + opts_.name + "' " + op + " (" + id.label() +
                  ") failed on global rank " + std::to_string(global_rank(rank_)) +
                  (timed_out ? " after timeout " + seconds_text(opts_.timeout_s) : "") +
                  (who.empty() ? "" : ": " + who) + " [" + cause + "]");
}

void GlooComm::all_reduce(void* data, size_t count, CommDType t, ReduceOp op) {
  all_reduce_async(data, count, t, op)->wait();
}

std::shared_ptr<Work> GlooComm::all_reduce_async(void* data, size_t count, CommDType t,
                                                 ReduceOp op) {
  return submit("all_reduce", [=, this] { do_all_reduce(data, count, t, op); });
}

void GlooComm::reduce_scatter(const void* in, void* out, size_t count, CommDType t, ReduceOp op) {
  reduce_scatter_async(in, out, count, t, op)->wait();
}

std::shared_ptr<Work> GlooComm::reduce_scatter_async(const void* in, void* out, size_t count,
                                                     CommDType t, ReduceOp op) {
  return submit("reduce_scatter", [=, this] { do_reduce_scatter(in, out, count, t, op); });
}

void GlooComm::all_gather(const void* in, void* out, size_t count, CommDType t) {
  all_gather_async(in, out, count, t)->wait();
}

std::shared_ptr<Work> GlooComm::all_gather_async(const void* in, void* out, size_t count,
                                                 CommDType t) {
  return submit("all_gather", [=, this] { do_all_gather(in, out, count, t); });
}

void GlooComm::broadcast(void* data, size_t count, CommDType t, int root) {
  broadcast_async(data, count, t, root)->wait();
}

std::shared_ptr<Work> GlooComm::broadcast_async(void* data, size_t count, CommDType t, int root) {
  return submit("broadcast", [=, this] { do_broadcast(data, count, t, root); });
}

std::shared_ptr<Work> GlooComm::reduce_async(void* data, size_t count, CommDType t, ReduceOp op,
                                             int root) {
  return submit("reduce", [=, this] { do_reduce(data, count, t, op, root); });
}

void GlooComm::all_to_all(const void* in, void* out, size_t count, CommDType t) {
  submit("all_to_all", [=, this] { do_all_to_all(in, out, count, t); })->wait();
}

void GlooComm::send(const void* data, size_t bytes, int peer, int tag) {
  submit_transfer("send",
                  transfer_peers({{true, const_cast<void*>(data), bytes, peer, tag}}, rank_),
                  [=, this] { do_send(data, bytes, peer, tag); })
      ->wait();
}

void GlooComm::recv(void* data, size_t bytes, int peer, int tag) {
  submit_transfer("recv", transfer_peers({{false, data, bytes, peer, tag}}, rank_), [=, this] {
    do_recv(data, bytes, peer, tag);
  })->wait();
}

void GlooComm::send_recv_batch(const std::vector<P2pTransfer>& transfers) {
  submit_transfer("send_recv", transfer_peers(transfers, rank_), [&, this] {
    do_send_recv_batch(transfers);
  })->wait();
}

void GlooComm::barrier() {
  submit("barrier", [this] { do_barrier(); })->wait();
}

std::unique_ptr<Comm> make_gloo_comm(std::shared_ptr<Store> store, int rank, int size,
                                     const CommOptions& opts) {
  return std::make_unique<GlooComm>(std::move(store), rank, size, opts);
}

}  // namespace trainer::dist
