// Rendezvous sockets (socket_util.h).
#include "hier/socket_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "common/format.h"
#include "peerlink/errors.h"

namespace peerlink::hier {

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

bool ifname_matches(const std::string& spec_in, const std::string& name) {
  std::string spec = spec_in;
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') {
    exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec.erase(0, 1);
  }
  bool hit = false;
  size_t at = 0;
  while (at <= spec.size()) {
    size_t comma = spec.find(',', at);
    std::string item = spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!item.empty()) hit = hit || (exact ? name == item : name.compare(0, item.size(), item) == 0);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return exclude ? !hit : hit;
}

namespace {

struct Candidate {
  std::string ifname;
  SockAddr addr;
  bool loopback;
};

std::vector<Candidate> interfaces() {
  std::vector<Candidate> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    Candidate c;
    c.ifname = i->ifa_name ? i->ifa_name : "";
    c.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    if (fam == AF_INET6) {
      auto* a6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
      c.addr.len = sizeof(sockaddr_in6);
    } else {
      c.addr.len = sizeof(sockaddr_in);
    }
    std::memcpy(&c.addr.ss, i->ifa_addr, c.addr.len);
    out.push_back(std::move(c));
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

SockAddr pick_listen_address(const std::string& spec, std::string* ifname) {
  std::vector<Candidate> all = interfaces();
  auto first = [&](auto pred) -> const Candidate* {
    for (const Candidate& c : all)
      if (pred(c)) return &c;
    return nullptr;
  };
  const Candidate* pick = nullptr;
  if (!spec.empty()) {
    pick = first([&](const Candidate& c) { return ifname_matches(spec, c.ifname); });
  } else {
    pick = first([](const Candidate& c) { return c.ifname.compare(0, 2, "ib") == 0 && !c.loopback; });
    if (!pick) pick = first([](const Candidate& c) { return !c.loopback && c.ifname.compare(0, 6, "docker") != 0; });
    if (!pick) pick = first([](const Candidate& c) { return !c.loopback; });
    if (!pick) pick = first([](const Candidate& c) { return c.loopback; });
  }
  if (!pick) {
    std::string names;
    for (const Candidate& c : all) names += (names.empty() ? "" : ", ") + c.ifname;
    throw InvalidArgument(common::format(
        "multi-node rendezvous: no interface that is up matches '{}' (PEERLINK_SOCKET_IFNAME / NCCL_SOCKET_IFNAME); "
        "interfaces with an address: {}",
        spec, names.empty() ? "none" : names));
  }
  *ifname = pick->ifname;
  return pick->addr;
}

// Packed: [0] family (4 or 6), [1..3) port (big-endian), [3..19) address (IPv4 in the first 4).
RendezvousAddress pack_address(const SockAddr& a) {
  RendezvousAddress b{};
  if (a.ss.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a.ss);
    b[0] = 4;
    std::memcpy(&b[1], &v4->sin_port, 2);
    std::memcpy(&b[3], &v4->sin_addr, 4);
  } else {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a.ss);
    b[0] = 6;
    std::memcpy(&b[1], &v6->sin6_port, 2);
    std::memcpy(&b[3], &v6->sin6_addr, 16);
  }
  return b;
}

std::string unpack_address(const RendezvousAddress& b, SockAddr* out) {
  SockAddr a;
  uint16_t port = 0;
  std::memcpy(&port, &b[1], 2);
  if (port == 0) return "port 0";
  if (b[0] == 4) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&a.ss);
    v4->sin_family = AF_INET;
    v4->sin_port = port;
    std::memcpy(&v4->sin_addr, &b[3], 4);
    a.len = sizeof(sockaddr_in);
  } else if (b[0] == 6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = port;
    std::memcpy(&v6->sin6_addr, &b[3], 16);
    a.len = sizeof(sockaddr_in6);
  } else {
    return common::format("address family byte {}", b[0]);
  }
  *out = a;
  return "";
}

std::string to_string(const SockAddr& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a.ss.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a.ss);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    return common::format("{}:{}", host, ntohs(v4->sin_port));
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a.ss);
  inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
  return common::format("[{}]:{}", host, ntohs(v6->sin6_port));
}

namespace {

// Milliseconds left until the deadline, for poll (at least 0, at most a second so that a long
// wait still notices EINTR storms and clock changes promptly).
int poll_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left < 1000 ? left : 1000);
}

IoResult wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = poll_ms(deadline);
    int r = ::poll(&p, 1, ms);
    if (r > 0) return (p.revents & (POLLERR | POLLNVAL)) && !(p.revents & (events | POLLHUP)) ? IoResult::Error : IoResult::Ok;
    if (r < 0 && errno != EINTR) return IoResult::Error;
    if (r == 0 && ms == 0) return IoResult::Timeout;
  }
}

}  // namespace

IoResult write_all(int fd, const void* p, size_t n, Clock::time_point deadline) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      c += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      IoResult w = wait_fd(fd, POLLOUT, deadline);
      if (w != IoResult::Ok) return w;
      continue;
    }
    return (k < 0 && (errno == EPIPE || errno == ECONNRESET)) ? IoResult::Closed : IoResult::Error;
  }
  return IoResult::Ok;
}

IoResult read_exact(int fd, void* p, size_t n, Clock::time_point deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t k = ::recv(fd, c, n, MSG_DONTWAIT);
    if (k > 0) {
      c += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return IoResult::Closed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      IoResult w = wait_fd(fd, POLLIN, deadline);
      if (w != IoResult::Ok) return w;
      continue;
    }
    return errno == ECONNRESET ? IoResult::Closed : IoResult::Error;
  }
  return IoResult::Ok;
}

Fd connect_until(const SockAddr& a, Clock::time_point deadline, std::string* why) {
  auto backoff = std::chrono::milliseconds(5);
  for (;;) {
    Fd fd(::socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) {
      *why = common::format("socket: {}", std::strerror(errno));
      return Fd();
    }
    int err = 0;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a.ss), a.len) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        IoResult w = wait_fd(fd.get(), POLLOUT, deadline);
        socklen_t len = sizeof err;
        err = 0;
        if (w == IoResult::Timeout) err = ETIMEDOUT;
        else if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) return fd;
    *why = std::strerror(err);
    bool retry = err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == ETIMEDOUT ||
                 err == ECONNRESET || err == EAGAIN;
    if (!retry || Clock::now() + backoff >= deadline) return Fd();
    std::this_thread::sleep_for(backoff);
    if (backoff < std::chrono::milliseconds(200)) backoff *= 2;
  }
}

}  // namespace peerlink::hier
