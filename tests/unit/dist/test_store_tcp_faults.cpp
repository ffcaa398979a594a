// TcpStore faults: a peer writing garbage or hanging up must not take the server down, a port in
// use gives an error naming host:port, and an absent server makes clients give up at the timeout.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <thread>

#include "runtime/dist/rendezvous.h"
#include "runtime/dist/socket_util.h"
#include "runtime/dist/store_wire.h"
#include "runtime/dist/tcp_store.h"

using namespace trainer::dist;
using namespace std::chrono_literals;

namespace {

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

int raw_connect(int port) {
  std::string err;
  int fd = net::connect_tcp("127.0.0.1", port, &err);
  INFO(err);
  REQUIRE(fd >= 0);
  return fd;
}

// The server answered, so it is alive: a fresh client can still set and get.
void require_server_alive(int port) {
  auto c = make_tcp_store("127.0.0.1", port, false, 2000ms);
  c->set("alive", bytes("yes"));
  CHECK(c->get("alive") == bytes("yes"));
}

// A socket listening on 127.0.0.1 (any port, in *addr) that never accepts.
int loopback_listener(int backlog, sockaddr_in* addr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(addr), sizeof *addr) == 0);
  REQUIRE(::listen(fd, backlog) == 0);
  socklen_t len = sizeof *addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(addr), &len);
  return fd;
}

}  // namespace

TEST_CASE("tcp_store_server_survives_garbage_bytes_and_drops_that_connection", "[store]") {
  TcpStore server("127.0.0.1", 0, true, 2000ms);
  server.set("before", bytes("1"));
  const char* payloads[] = {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "\xff\xff\xff\xff garbage",
                            "\x05\x00\x00\x00\x63zzzz", "\x01\x00\x00"};
  for (const char* p : payloads) {
    int fd = raw_connect(server.port());
    REQUIRE(net::write_all(fd, p, std::strlen(p)));
    if (std::strlen(p) > 4) {  // a complete bad frame: the server hangs up on us
      char c;
      net::set_recv_timeout(fd, 2.0);
      CHECK_FALSE(net::read_exact(fd, &c, 1));
    }
    net::close_fd(fd);
  }
  require_server_alive(server.port());
  CHECK(server.get("before") == bytes("1"));
}

TEST_CASE("tcp_store_server_survives_a_client_that_closes_while_blocked", "[store]") {
  TcpStore server("127.0.0.1", 0, true, 2000ms);
  for (int i = 0; i < 3; ++i) {
    int fd = raw_connect(server.port());
    auto frame =
        wire::Writer().u8(static_cast<uint8_t>(wire::Cmd::get)).str("never_set").i64(60000).frame();
    REQUIRE(net::write_all(fd, frame.data(), frame.size()));
    std::this_thread::sleep_for(50ms);  // parked on the server now
    net::close_fd(fd);                  // the peer dies mid-get
  }
  server.set("never_set", bytes("now"));  // wakes the parked requests of dead connections
  require_server_alive(server.port());
}

// Rank 0's fds run out (a large job under `ulimit -n 1024`, or a flood of connections): the
// connections wait in the listen backlog while the server polls the rest, rather than spinning
// a core on a listening socket that stays readable; once fds free, it accepts and serves again.
// In a child process, whose fd limit is lowered to 64 (its exit code says what failed).
TEST_CASE("tcp_store_server_out_of_fds_waits_without_spinning_then_serves", "[store]") {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = 64;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::_exit(10);
    const auto cpu_s = [] {
      rusage u{};
      ::getrusage(RUSAGE_SELF, &u);
      return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
    };
    int code = 0;
    try {
      TcpStore server("127.0.0.1", 0, true, 2000ms);
      std::vector<int> clients;
      for (int i = 0; i < 200; ++i) {  // until this process has no fd left
        std::string err;
        const int fd = net::connect_tcp("127.0.0.1", server.port(), &err, nullptr, 2000ms);
        if (fd < 0) break;
        clients.push_back(fd);
      }
      std::this_thread::sleep_for(200ms);
      const double before = cpu_s();
      std::this_thread::sleep_for(1000ms);
      if (clients.size() >= 200)
        code = 11;  // the limit did not bite
      else if (cpu_s() - before > 0.25)
        code = 12;  // the server spun
      for (const int fd : clients) net::close_fd(fd);
      if (code == 0) {
        auto c = make_tcp_store("127.0.0.1", server.port(), false, 5000ms);
        c->set("after", bytes("yes"));
        if (c->get("after") != bytes("yes")) code = 13;
      }
    } catch (const std::exception&) {
      code = 14;  // it did not serve again
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  // 11: no fd ran out, 12: the server spun (CPU while idle), 13/14: it did not serve again
  CHECK(WEXITSTATUS(status) == 0);
}

// The rendezvous raises the soft open-files limit to the hard one (in a child whose soft limit is
// lowered first, to half the hard one at most).
TEST_CASE("the_rendezvous_raises_the_open_files_limit_to_the_hard_one", "[store]") {
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rlimit low = limit;
    low.rlim_cur = std::min<rlim_t>(64, limit.rlim_max / 2);
    if (::setrlimit(RLIMIT_NOFILE, &low) != 0) ::_exit(10);
    const uint64_t now = raise_open_files_limit();
    rlimit after{};
    ::getrlimit(RLIMIT_NOFILE, &after);
    ::_exit(now > low.rlim_cur && after.rlim_cur == now ? 0 : 11);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("tcp_store_port_in_use_names_host_and_port", "[store]") {
  TcpStore first("127.0.0.1", 0, true, 1000ms);
  try {
    TcpStore second("127.0.0.1", first.port(), true, 1000ms);
    FAIL("second server bound the same port");
  } catch (const StoreError& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("127.0.0.1:" + std::to_string(first.port())) != std::string::npos);
    CHECK(msg.find("in use") != std::string::npos);
  }
}

TEST_CASE("tcp_store_client_gives_up_connecting_at_its_timeout", "[store]") {
  int port;
  {
    TcpStore probe("127.0.0.1", 0, true, 1000ms);
    port = probe.port();
  }  // now free
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(make_tcp_store("127.0.0.1", port, false, 300ms), StoreTimeout);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 250ms);
  CHECK(took < 3s);
}

// A host that drops the SYNs (a firewall, a dead node; here a listener whose accept queue is
// full): the connect must end at the store's timeout, not after the kernel's SYN retries (about
// 2 minutes; so it did before, whatever distributed.timeout_s said).
TEST_CASE("tcp_store_client_gives_up_at_its_timeout_on_a_host_that_drops_syns", "[store]") {
  sockaddr_in addr{};
  const int listener = loopback_listener(0, &addr);  // never accepts: the queue fills
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    fillers.push_back(c);
  }
  std::this_thread::sleep_for(100ms);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(make_tcp_store("127.0.0.1", ntohs(addr.sin_port), false, 500ms), StoreError);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < 4s);
  for (int c : fillers) ::close(c);
  ::close(listener);
}

TEST_CASE("a_rendezvous_whose_rank_0_never_serves_names_rank_0", "[store]") {
  // Rank 0 stopped or died before it served the store: the others' error must name it.
  int port;
  {
    TcpStore probe("127.0.0.1", 0, true, 1000ms);
    port = probe.port();
  }  // now free
  LaunchEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.master_port = port;
  try {
    make_rendezvous_store(env, 300ms);
    FAIL("connected to a store nobody serves");
  } catch (const StoreTimeout& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("global rank 0, which serves the store at 127.0.0.1:" + std::to_string(port)) !=
          std::string::npos);
    CHECK(msg.find("MASTER_ADDR and MASTER_PORT") != std::string::npos);
  }
}

// MASTER_PORT held by another service (it accepts, then answers nothing a store would): the
// rendezvous says so, naming MASTER_ADDR and MASTER_PORT, not "connection lost" later on.
TEST_CASE("a_rendezvous_at_a_port_another_service_holds_says_so", "[store]") {
  sockaddr_in addr{};
  const int listener = loopback_listener(8, &addr);  // connections queue; nothing ever answers
  LaunchEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.master_port = ntohs(addr.sin_port);
  try {
    make_rendezvous_store(env, 300ms);
    FAIL("a store at a port nobody serves one on");
  } catch (const StoreError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("rendezvous:") != std::string::npos);
    CHECK(msg.find("MASTER_ADDR and MASTER_PORT") != std::string::npos);
  }
  ::close(listener);
}

TEST_CASE("tcp_store_client_that_starts_first_connects_once_the_server_is_up", "[store]") {
  int port;
  {
    TcpStore probe("127.0.0.1", 0, true, 1000ms);
    port = probe.port();
  }
  std::shared_ptr<Store> client;
  std::thread t([&] { client = make_tcp_store("127.0.0.1", port, false, 5000ms); });
  std::this_thread::sleep_for(200ms);
  TcpStore server("127.0.0.1", port, true, 5000ms);
  t.join();
  client->set("k", bytes("v"));
  CHECK(server.get("k") == bytes("v"));
}

// The server lives in rank 0's process: once it is gone, the first call finds out at once and
// every later call fails at once too, instead of reconnecting until its timeout each time.
TEST_CASE("tcp_store_client_fails_at_once_after_the_server_is_gone", "[store]") {
  auto server = std::make_unique<TcpStore>("127.0.0.1", 0, true, 5000ms);
  auto client = make_tcp_store("127.0.0.1", server->port(), false, 5000ms);
  client->set("k", bytes("v"));
  server.reset();  // rank 0 died
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(client->check({"k"}), Catch::Contains("lost"));
  for (int i = 0; i < 3; ++i) {
    CHECK_THROWS_AS(client->set("failed/1", bytes("x")), StoreLost);
    CHECK_THROWS_WITH(client->check({"k"}), Catch::Contains("lost"));
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
}

// A failing rank 0 keeps serving until the others have read who failed and left: linger returns
// once their connections close, and after its bound when one never closes (a hung rank's).
TEST_CASE("tcp_store_linger_serves_until_the_clients_leave_or_the_bound_passes", "[store]") {
  TcpStore server("127.0.0.1", 0, true, 5000ms);
  server.set("failed/0", bytes("why"));
  auto client = make_tcp_store("127.0.0.1", server.port(), false, 5000ms);
  std::string read_during_linger;
  std::thread leaver([&] {
    std::this_thread::sleep_for(300ms);
    const auto v = client->get("failed/0");  // still served
    read_during_linger.assign(v.begin(), v.end());
    client.reset();  // the rank exits
  });
  auto t0 = std::chrono::steady_clock::now();
  server.linger(10s);
  const auto took = std::chrono::steady_clock::now() - t0;
  leaver.join();
  CHECK(read_during_linger == "why");
  CHECK(took >= 250ms);
  CHECK(took < 3s);  // not the bound

  auto stays = make_tcp_store("127.0.0.1", server.port(), false, 5000ms);
  stays->set("k", bytes("v"));
  t0 = std::chrono::steady_clock::now();
  server.linger(600ms);  // `stays` never leaves
  const auto bounded = std::chrono::steady_clock::now() - t0;
  CHECK(bounded >= 550ms);
  CHECK(bounded < 3s);
  CHECK_THROWS_AS(server.set("after", bytes("x")), StoreLost);  // closed for its own use
}

// A failing client's linger keeps its connections open until its process exits (here: past its
// destruction), so that the server's linger, which waits for them, ends after that process is
// gone and a launcher sees the failed rank exit first.
TEST_CASE("a_tcp_store_clients_linger_keeps_its_connections_until_the_process_exits", "[store]") {
  TcpStore server("127.0.0.1", 0, true, 5000ms);
  auto failing = make_tcp_store("127.0.0.1", server.port(), false, 5000ms);
  failing->set("failed/1", bytes("why"));
  failing->linger(10s);  // returns at once: it serves nothing
  failing.reset();
  const auto t0 = std::chrono::steady_clock::now();
  server.linger(400ms);  // its connection did not close: the bound
  CHECK(std::chrono::steady_clock::now() - t0 >= 350ms);
}

// A failure travelling round a Gloo ring: the ranks learn of it one after another, each when its
// neighbour exits, so they leave the store one by one for longer than the bound. Linger serves
// them all: the bound counts from the last one that left (fuzz_faults seed 17, trial 11).
// (They leave 0.3 s apart, well inside the 2 s bound: with a 0.5 s bound, a cascade thread that a
// loaded machine did not run for 0.2 s more let the linger end before the last one, 0.84 s in.
// The times are checked against when the last one left, however late that is: a fixed "under
// 2 s" failed where the cascade itself ran late.)
TEST_CASE("tcp_store_linger_serves_a_cascade_of_leavers_past_its_bound", "[store]") {
  TcpStore server("127.0.0.1", 0, true, 5000ms);
  server.set("failed/2", bytes("why"));
  std::vector<std::shared_ptr<Store>> ranks;
  for (int i = 0; i < 8; ++i)
    ranks.push_back(make_tcp_store("127.0.0.1", server.port(), false, 5000ms));
  std::vector<std::string> read(ranks.size());
  std::chrono::steady_clock::time_point last_read;  // the last one's, as it leaves
  std::thread cascade([&] {
    for (size_t i = 0; i < ranks.size(); ++i) {
      std::this_thread::sleep_for(300ms);
      const auto v = ranks[i]->get("failed/2");
      read[i].assign(v.begin(), v.end());
      last_read = std::chrono::steady_clock::now();
      ranks[i].reset();  // exits
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  server.linger(2000ms);
  const auto returned = std::chrono::steady_clock::now();
  cascade.join();
  for (const auto& r : read) CHECK(r == "why");
  CHECK(last_read - t0 > 2000ms);        // the cascade (8 x 0.3 s) outlasted the bound
  CHECK(returned >= last_read);          // and linger served its last one: past the bound
  CHECK(returned - last_read < 2000ms);  // returning when it left (not a bound later)
}

// A hung server (rank 0 stopped: its socket accepts, nothing answers): a blocked get gives up at
// its timeout plus a margin of timeout/2 (at least 2 s, at most 30 s), and says the server is
// gone or hung, so that the ranks waiting on it name rank 0 within about their timeout.
TEST_CASE("tcp_store_get_on_a_hung_server_gives_up_after_timeout_and_margin", "[store]") {
  // A listener that never accepts stands in for a stopped rank 0: the kernel completes the
  // connection, and the request waits in its buffer.
  int port = 0;
  const int hung = net::listen_tcp("127.0.0.1", 0, &port);
  REQUIRE(hung >= 0);
  auto stuck = make_tcp_store("127.0.0.1", port, false, 1000ms);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(stuck->get("never"), StoreLost);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 2500ms);  // the timeout and the margin: a slow server is not cut short
  CHECK(took < 5s);       // not timeout + 30 s
  net::close_fd(hung);
}

TEST_CASE("a_store_host_that_does_not_resolve_is_refused_naming_it", "[store]") {
  // (an empty name is refused by getaddrinfo itself, with no DNS server asked: the same answer
  // here and on a machine with a network, which a misspelt name would not give)
  std::string err;
  bool unknown_host = false;
  CHECK(net::connect_tcp("", 1, &err, &unknown_host) == -1);
  CHECK(unknown_host);
  // A store's clients retry it for min(timeout, 60 s) (a DNS record may come late), then say it
  // is the host, not that the store timed out.
  try {
    make_tcp_store("", 29500, false, 1s);
    FAIL("a client of an unresolvable host connected");
  } catch (const StoreTimeout& e) {
    FAIL("timed out instead: " << e.what());
  } catch (const StoreError& e) {
    CHECK_THAT(e.what(), Catch::Contains("cannot resolve the store's host '' (MASTER_ADDR"));
  }
  // The address is fine, nothing listens: that is waited for (a store that comes up late).
  CHECK(net::connect_tcp("127.0.0.1", 1, &err, &unknown_host) == -1);
  CHECK_FALSE(unknown_host);
}
