// Sockets of the multi-node rendezvous: the listening address chosen as NCCL chooses its bootstrap
// interface, the address packed into the bytes a unique id carries, and reads, writes and connects
// bounded by a deadline.
#pragma once
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "peerlink/multinode.h"

namespace peerlink::hier {

using Clock = std::chrono::steady_clock;

// A file descriptor owned (closed on destruction).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
};

// NCCL_SOCKET_IFNAME's syntax: "" = auto; "a,b" names starting with a or b; "^a,b" names starting
// with neither; "=a,b" exactly a or b.
bool ifname_matches(const std::string& spec, const std::string& name);
// The address to listen on: the first interface that is up and matches `spec` (IPv4 or IPv6, not
// IPv6 link-local, whose scope means nothing on another host). Auto: ib* first, then any but
// docker* and loopback, then docker*, then loopback, as NCCL. InvalidArgument when none matches.
SockAddr pick_listen_address(const std::string& spec, std::string* ifname);

RendezvousAddress pack_address(const SockAddr& a);
// "" and fills `out`, or what is wrong with the bytes (they came inside a unique id).
std::string unpack_address(const RendezvousAddress& bytes, SockAddr* out);
std::string to_string(const SockAddr& a);

enum class IoResult { Ok, Closed, Timeout, Error };
// Whole buffers, waiting at most until `deadline` (poll; EINTR retried).
IoResult write_all(int fd, const void* p, size_t n, Clock::time_point deadline);
IoResult read_exact(int fd, void* p, size_t n, Clock::time_point deadline);
// Connects, retrying refused and unreachable attempts (the service may not listen yet, or briefly
// refuse under a burst of ranks) until `deadline`; an invalid Fd with `why` set otherwise.
Fd connect_until(const SockAddr& a, Clock::time_point deadline, std::string* why);

}  // namespace peerlink::hier
