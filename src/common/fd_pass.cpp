#include "common/fd_pass.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"

namespace peerlink::common {
namespace {

constexpr uint32_t kReplyMagic = 0x70664452;  // "RDfp"

struct Reply {
  uint32_t magic;
  uint32_t count;
};

[[noreturn]] void sys_fail(const std::string& what, const char* call) {
  int e = errno;
  throw SysError(common::format("{}: {} failed: {}", what, call, std::strerror(e)), e, call);
}

sockaddr_un abstract_addr(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof a.sun_path)
    throw InvalidArgument(common::format("fd socket name '{}' is longer than {} bytes", name, sizeof a.sun_path - 2));
  a.sun_path[0] = '\0';  // abstract namespace: no file, gone when the last socket closes
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

ucred peer_cred(int fd) {
  ucred c{};
  socklen_t l = sizeof c;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &l) != 0) sys_fail("fd passing", "getsockopt(SO_PEERCRED)");
  return c;
}

void set_timeouts(int fd, int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

void UniqueFd::reset() noexcept {
  int fd = std::exchange(fd_, -1);
  if (fd >= 0) ::close(fd);
}

const char* fd_passing_name(FdPassing m) {
  switch (m) {
    case FdPassing::Auto: return "auto";
    case FdPassing::Pidfd: return "pidfd";
    case FdPassing::Socket: return "socket";
  }
  return "?";
}

FileId file_id(int fd) {
  struct stat st{};
  if (fstat(fd, &st) != 0) sys_fail(common::format("descriptor {}", fd), "fstat");
  return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

uint64_t file_size(int fd) {
  struct stat st{};
  if (fstat(fd, &st) != 0) sys_fail(common::format("descriptor {}", fd), "fstat");
  return static_cast<uint64_t>(st.st_size);
}

UniqueFd pidfd_open_process(int32_t pid) {
  if (pid <= 0) throw InvalidArgument(common::format("pidfd_open: bad pid {}", pid));
  long r = syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (r < 0) sys_fail(common::format("opening process {}", pid), "pidfd_open");
  return UniqueFd(static_cast<int>(r));
}

UniqueFd pidfd_dup(int pidfd, int remote_fd) {
  long r = syscall(SYS_pidfd_getfd, pidfd, remote_fd, 0);  // the new descriptor is close-on-exec
  if (r < 0) sys_fail(common::format("duplicating descriptor {} of another process", remote_fd), "pidfd_getfd");
  return UniqueFd(static_cast<int>(r));
}

std::string fd_socket_name(const std::string& job_prefix, int32_t pid) {
  return common::format("peerlink{}fd{}", job_prefix, pid);
}

FdServer::FdServer(const std::string& name, Lookup lookup, Allowed allowed)
    : lookup_(std::move(lookup)), allowed_(std::move(allowed)) {
  listen_ = UniqueFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_) sys_fail("fd server", "socket");
  socklen_t len = 0;
  sockaddr_un a = abstract_addr(name, &len);
  if (bind(listen_.get(), reinterpret_cast<sockaddr*>(&a), len) != 0)
    sys_fail(common::format("fd server '{}'", name), "bind");
  if (::listen(listen_.get(), 64) != 0) sys_fail("fd server", "listen");
  stop_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_) sys_fail("fd server", "eventfd");
  // The server thread takes no process-directed signals (the caller's SIGINT handler, e.g.
  // Python's KeyboardInterrupt, belongs to the threads the caller made): the mask it inherits is
  // all-blocked, restored here right after it started.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

FdServer::~FdServer() {
  uint64_t one = 1;
  if (write(stop_.get(), &one, sizeof one) < 0) {
    // cannot happen for an eventfd below its maximum; the join below would then hang, so detach
    thread_.detach();
    return;
  }
  thread_.join();
}

void FdServer::run() {
  for (;;) {
    pollfd p[2] = {{listen_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    int n = poll(p, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[1].revents & POLLIN)) return;
    if (!(p[0].revents & POLLIN)) continue;
    UniqueFd conn(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn) continue;  // EAGAIN (another wakeup raced) or the client went away
    try {
      serve(conn.get());
    } catch (...) {
      // A misbehaving client costs its own connection only.
    }
  }
}

// One request per connection: 8-byte key in, Reply + SCM_RIGHTS out. A refused request gets a
// reply with count 0 (the client reports it) rather than a silent close.
void FdServer::serve(int conn) {
  set_timeouts(conn, 1000);
  ucred c = peer_cred(conn);
  std::vector<int> fds;
  uint64_t key = 0;
  ssize_t got = recv(conn, &key, sizeof key, MSG_WAITALL);
  if (got == static_cast<ssize_t>(sizeof key) && c.uid == getuid() && allowed_(c.pid)) fds = lookup_(key);
  if (fds.size() > kMaxFdsPerRequest) fds.clear();
  Reply r{kReplyMagic, static_cast<uint32_t>(fds.size())};
  iovec io{&r, sizeof r};
  msghdr m{};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  std::vector<char> ctl(CMSG_SPACE(sizeof(int) * std::max<size_t>(1, fds.size())));
  if (!fds.empty()) {
    m.msg_control = ctl.data();
    m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(h), fds.data(), sizeof(int) * fds.size());
  }
  if (sendmsg(conn, &m, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof r) && !fds.empty())
    served_.fetch_add(1, std::memory_order_release);
}

std::vector<UniqueFd> request_fds(const std::string& name, int32_t expect_pid, uint64_t key, int timeout_ms) {
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) sys_fail("fd request", "socket");
  set_timeouts(s.get(), timeout_ms);
  socklen_t len = 0;
  sockaddr_un a = abstract_addr(name, &len);
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&a), len) != 0)
    sys_fail(common::format("connecting to the descriptor socket of process {} ('@{}')", expect_pid, name), "connect");
  ucred c = peer_cred(s.get());
  if (c.uid != getuid() || c.pid != expect_pid)
    throw Error(common::format(
        "descriptor socket '@{}' belongs to pid {} uid {}, expected pid {} uid {}: refusing its descriptors", name,
        c.pid, c.uid, expect_pid, getuid()));
  if (send(s.get(), &key, sizeof key, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof key))
    sys_fail(common::format("asking process {} for export {}", expect_pid, key), "send");
  Reply r{};
  iovec io{&r, sizeof r};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxFdsPerRequest)];
  msghdr m{};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  ssize_t got = recvmsg(s.get(), &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  if (got < 0) sys_fail(common::format("receiving export {} from process {}", key, expect_pid), "recvmsg");
  // Take ownership of whatever arrived before judging the reply: nothing leaks on a bad one.
  std::vector<UniqueFd> fds;
  for (cmsghdr* h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  if (got != static_cast<ssize_t>(sizeof r) || r.magic != kReplyMagic || (m.msg_flags & MSG_CTRUNC) ||
      r.count != fds.size())
    throw Error(common::format("malformed descriptor reply from process {} for export {} ({} bytes, {} descriptors)",
                               expect_pid, key, got, fds.size()));
  if (fds.empty())
    throw Error(common::format(
        "process {} refused export {} (not exported any more, or this process is not a member of its job)", expect_pid,
        key));
  return fds;
}

}  // namespace peerlink::common
