#pragma once
// Store: the rendezvous key-value store (DESIGN.md "Launch and rendezvous"). Rank 0 serves a TCP
// store (TcpStore), or all ranks share a directory (FileStore). Gloo contexts and NCCL ids are
// exchanged through it; fault reports ("which rank failed") go through it too.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::dist {

// Any store failure: unreachable server, broken connection, bad reply, unusable directory.
struct StoreError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A get/wait/connect that ran past the store's timeout; the message names the missing key(s).
struct StoreTimeout : StoreError {
  using StoreError::StoreError;
};

// A TCP store client lost its server, which lives in global rank 0's process: that rank is gone
// or hung.
struct StoreLost : StoreError {
  using StoreError::StoreError;
};

// The port the store is to be served on is taken (rank 0 only).
struct StorePortInUse : StoreError {
  using StoreError::StoreError;
};

// A key's value, or nullopt where the key does not exist.
using MaybeValue = std::optional<std::vector<uint8_t>>;

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until the key exists or the timeout passes (throws StoreTimeout naming the key).
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  // Atomic add; returns the new value. A missing key counts as 0.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Blocks until all keys exist (throws StoreTimeout naming the missing ones).
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;  // non-blocking: all exist?
  // Non-blocking: the value of each key that exists now, nullopt for the others; and whether
  // each exists, without its value (Gloo's address keys hold kilobytes). A TCP store answers
  // each in one request: naming a failed rank polls a key per member of the group, and a request
  // per key made that N requests per poll per rank, N^2 for a group failing together. (These
  // defaults ask per key.)
  virtual std::vector<MaybeValue> get_existing(const std::vector<std::string>& keys);
  virtual std::vector<bool> which_exist(const std::vector<std::string>& keys);
  virtual void set_timeout(std::chrono::milliseconds t) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  // Called by a failing process before it exits. Where it serves the store (TCP, rank 0), it
  // keeps serving until every other process has closed its connections, or none has closed one
  // for `max` (a hung rank's never closes), and at most 4 x max: ranks still finding out read
  // there who failed ("failed/<rank>"), where a server gone with this process would make them
  // blame rank 0. A TCP client keeps its connections open until its process exits: the server's
  // linger, which waits for them to close, ends after this process has exited, so a launcher
  // sees the failed rank exit before rank 0 and names it. Elsewhere nothing to do.
  virtual void linger(std::chrono::milliseconds /*max*/) {}
};

// Keys are prefixed with "<prefix>/" (one namespace per communicator).
std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> base, const std::string& prefix);

// TCP store: is_server starts the server in this process (on rank 0) on `port` (0 = any; the bound
// port is then available from TcpStore::port()); every rank, the server included, is a client.
// Clients connect with retry and exponential backoff until `timeout`.
std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, bool is_server,
                                      std::chrono::milliseconds timeout);
std::shared_ptr<Store> make_file_store(const std::string& dir, std::chrono::milliseconds timeout);

}  // namespace trainer::dist
