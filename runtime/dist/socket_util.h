#pragma once
// Thin POSIX socket helpers for the TcpStore (IPv4, blocking client sockets).
#include <chrono>
#include <cstddef>
#include <string>

namespace trainer::dist::net {

// Listens on 0.0.0.0:port (0 = any) with SO_REUSEADDR; returns the fd and sets *bound_port.
// Throws StoreError naming host:port when the port cannot be bound (e.g. already in use).
int listen_tcp(const std::string& host_for_message, int port, int* bound_port);

// One connection attempt of at most `limit` (a host that drops the SYNs - a firewall, a dead
// or partitioned node, a full accept queue - would otherwise hold a blocking connect() for the
// kernel's SYN retries, about 2 minutes); returns the (blocking) fd, or -1 with *error set.
// *unknown_host (when given) says whether the name does not resolve at all (EAI_NONAME: no retry
// will help; EAI_AGAIN, a DNS server that does not answer now, is not that).
int connect_tcp(const std::string& host, int port, std::string* error, bool* unknown_host = nullptr,
                std::chrono::milliseconds limit = std::chrono::milliseconds(10000));

// Blocking full write / read; return false when the peer closed or the socket failed.
bool write_all(int fd, const void* data, size_t n);
bool read_exact(int fd, void* data, size_t n);

void set_nonblocking(int fd);
void set_nodelay(int fd);
void set_recv_timeout(int fd, double seconds);
void close_fd(int fd);

}  // namespace trainer::dist::net
