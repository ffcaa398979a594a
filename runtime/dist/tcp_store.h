#pragma once
// TcpStore: the Store client of a TcpStoreServer; the rank that serves owns the server too.
// Each call takes an idle connection from a small pool (opening one when all are busy), so a
// thread blocked in get() never holds up another thread's set(). The server lives in rank 0's
// process and never restarts: once a call loses its connection or gets no reply, the store is
// gone (or hung) for good, and every later call fails at once instead of waiting out its
// timeout again (a group that is ending would otherwise pay that once per call).
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/dist/store.h"
#include "runtime/dist/store_wire.h"

namespace trainer::dist {

class TcpStoreServer;

class TcpStore : public Store {
 public:
  // is_server: serve on `port` (0 = any free port; see port()) in this process.
  TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout);
  ~TcpStore() override;

  int port() const { return port_; }
  const std::string& host() const { return host_; }

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys) override;
  bool check(const std::vector<std::string>& keys) override;
  std::vector<MaybeValue> get_existing(const std::vector<std::string>& keys) override;
  std::vector<bool> which_exist(const std::vector<std::string>& keys) override;
  void set_timeout(std::chrono::milliseconds t) override;
  std::chrono::milliseconds timeout() const override;
  void linger(std::chrono::milliseconds max) override;

 private:
  // Sends one request frame and returns the reply body.
  // blocking: a get/wait that the server answers only by its deadline.
  std::vector<uint8_t> call(const wire::Writer& request, bool blocking = false);
  int acquire();
  void release(int fd);
  int connect_with_backoff(bool server_was_up);
  [[noreturn]] void throw_timeout(const char* what, const std::vector<std::string>& keys) const;

  std::string host_;
  int port_ = 0;
  std::unique_ptr<TcpStoreServer> server_;
  mutable std::mutex mu_;
  std::chrono::milliseconds timeout_;
  std::vector<int> idle_;
  bool keep_open_ = false;  // a client's linger(): idle_ is left for the kernel to close at exit
  std::string lost_;  // why the server is gone, once a call found out; every later call throws it
};

}  // namespace trainer::dist
