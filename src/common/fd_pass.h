// Passing file descriptors between the processes of one job (memory exported by descriptor: memfd
// segments of the host backend, CUDA/HIP VMM allocations). Two mechanisms:
//  - pidfd_getfd(2): the importer duplicates the exporter's descriptor itself. No thread or socket
//    in the exporter, but the kernel requires ptrace permission over the exporter (same uid and
//    Yama ptrace_scope 0, or CAP_SYS_PTRACE); probed per exporter, EPERM falls back.
//  - SCM_RIGHTS over an abstract Unix socket whose name carries the job prefix and the exporter's
//    pid. Both ends check SO_PEERCRED: same uid, and the process the handle names (client side) /
//    a pid of the job (server side). Abstract names vanish with the process: nothing to unlink.
// Every descriptor is held by a UniqueFd; nothing here leaks one on an error path.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace peerlink::common {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset() noexcept;

 private:
  int fd_ = -1;
};

// Which mechanism an importer uses (Options::fd_passing).
enum class FdPassing : uint32_t { Auto = 0, Pidfd = 1, Socket = 2 };
const char* fd_passing_name(FdPassing m);

// Identity of an open file (fstat st_dev/st_ino): what an importer checks a received descriptor
// against, so a descriptor number reused by the exporter for another file is never mapped.
struct FileId {
  uint64_t dev = 0, ino = 0;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
};
FileId file_id(int fd);    // SysError on failure
uint64_t file_size(int fd);

// pidfd_open + pidfd_getfd. Errors: SysError with errno (EPERM: no ptrace permission, ENOSYS: old
// kernel, ESRCH: the process is gone, EBADF: no such descriptor in it).
UniqueFd pidfd_open_process(int32_t pid);
UniqueFd pidfd_dup(int pidfd, int remote_fd);

// The abstract socket name of the exporter `pid` of the job `job_prefix`.
std::string fd_socket_name(const std::string& job_prefix, int32_t pid);

// The exporter's side of SCM_RIGHTS: a thread accepting on the abstract socket; each request names
// an export by a 64-bit key; `lookup` returns the descriptors to send (borrowed, duplicated by the
// kernel on send) or an empty list (unknown key: the client gets a refusal). Credentials of the
// client: same uid, and `allowed_pid(pid)` true.
class FdServer {
 public:
  using Lookup = std::function<std::vector<int>(uint64_t key)>;
  using Allowed = std::function<bool(int32_t pid)>;
  FdServer(const std::string& name, Lookup lookup, Allowed allowed);
  ~FdServer();
  FdServer(const FdServer&) = delete;
  FdServer& operator=(const FdServer&) = delete;
  // Requests answered with descriptors; counted after sendmsg returned, so the client may hold the
  // descriptors a moment before this count shows them.
  uint64_t served() const { return served_.load(std::memory_order_acquire); }

 private:
  void run();
  void serve(int conn);
  UniqueFd listen_;
  UniqueFd stop_;  // eventfd: wakes the thread for shutdown
  Lookup lookup_;
  Allowed allowed_;
  std::thread thread_;
  std::atomic<uint64_t> served_{0};
};

// The importer's side: connects to `name`, checks that the server is `expect_pid` with our uid,
// asks for `key` and returns the descriptors (at most kMaxFdsPerRequest). Bounded by `timeout_ms`.
constexpr size_t kMaxFdsPerRequest = 250;  // SCM_MAX_FD is 253
std::vector<UniqueFd> request_fds(const std::string& name, int32_t expect_pid, uint64_t key, int timeout_ms);

}  // namespace peerlink::common
