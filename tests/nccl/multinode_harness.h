// Simulated nodes for the NCCL C API tests on the host backend: forked ranks that claim hosts,
// either by a hostname of their own in a new UTS namespace (unshare + sethostname: what differs
// between real nodes, CI runs as root) or by PEERLINK_HOSTID. The unique id is made by one chosen
// rank (inside its node) and handed to the others through a shared page; every rank's stderr can
// go to a file, so a test can read the NCCL_DEBUG=INFO lines that say which path each op took.
#pragma once
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "nccl_harness.h"

namespace mn {

enum class Claim { Uts, HostId };

struct Layout {
  const char* name;
  std::vector<int> node_of;  // per rank
  int id_maker = 0;
  Claim claim = Claim::Uts;
  int nranks() const { return static_cast<int>(node_of.size()); }
  int nodes() const {
    int m = 0;
    for (int n : node_of) m = std::max(m, n + 1);
    return m;
  }
};

// True when this process may create UTS namespaces (root, or CAP_SYS_ADMIN): probed in a child.
inline bool uts_available() {
  pid_t p = fork();
  if (p == 0) _exit(unshare(CLONE_NEWUTS) == 0 ? 0 : 1);
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// Makes this (forked) process a rank of node `node`: host "mn-<tag>-node<k>".
inline void claim_node(const Layout& l, int node, const std::string& tag) {
  std::string host = "mn-" + tag + "-node" + std::to_string(node);
  if (l.claim == Claim::Uts) {
    if (unshare(CLONE_NEWUTS) != 0) throw std::runtime_error("unshare(CLONE_NEWUTS) failed (not root?)");
    if (sethostname(host.c_str(), host.size()) != 0) throw std::runtime_error("sethostname failed");
    unsetenv("PEERLINK_HOSTID");
    unsetenv("NCCL_HOSTID");
  } else {
    setenv("PEERLINK_HOSTID", host.c_str(), 1);
  }
}

// The id, made by one rank, read by the others (bounded wait).
struct SharedId {
  std::atomic<int> ready;
  std::atomic<int> failed;
  ncclUniqueId id;
};

inline SharedId* new_shared_id() {
  void* m = mmap(nullptr, sizeof(SharedId), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::runtime_error("mmap failed");
  auto* s = new (m) SharedId;
  s->ready = 0;
  s->failed = 0;
  return s;
}

inline ncclUniqueId share_id(SharedId* s, bool maker) {
  if (maker) {
    try {
      s->id = new_id();
    } catch (...) {
      s->failed = 1;
      throw;
    }
    s->ready.store(1);
    return s->id;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!s->ready.load()) {
    if (s->failed.load()) throw std::runtime_error("the id maker failed");
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no unique id within 30 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return s->id;
}


// stderr of this process into `path` (read back with read_file).
inline void capture_stderr(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || dup2(fd, 2) < 0) throw std::runtime_error("cannot redirect stderr to " + path);
  close(fd);
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs fn(rank, id) on every rank of the layout, each in its claimed node, with the unique id of
// the layout's maker; extra_env is set in every rank first, and with `log_dir` every rank's stderr
// goes to log_dir/rank<r>.log from the start. `before_id` runs in the rank right after it claimed
// its node (a test's own isolation of one rank); `id_out` receives the id (for a leak check after).
inline std::string run_claimed(const Layout& l, const std::vector<std::pair<std::string, std::string>>& extra_env,
                               const std::function<void(int, const ncclUniqueId&)>& fn, int timeout_s = 120,
                               const std::string& log_dir = "",
                               const std::function<void(int)>& before_id = nullptr, ncclUniqueId* id_out = nullptr) {
  SharedId* shared = new_shared_id();
  std::string tag = std::to_string(getpid());
  std::string err = run_ranks(l.nranks(), [&](int rank) {
    if (!log_dir.empty()) capture_stderr(log_dir + "/rank" + std::to_string(rank) + ".log");
    claim_node(l, l.node_of[rank], tag);
    for (const auto& kv : extra_env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    if (before_id) before_id(rank);
    fn(rank, share_id(shared, rank == l.id_maker));
  }, timeout_s);
  if (id_out) *id_out = shared->id;
  munmap(shared, sizeof(SharedId));
  return err;
}

// The same with the communicator made: fn(rank, comm), then comm destroyed unless fn did (null).
inline std::string run_layout(const Layout& l, const std::vector<std::pair<std::string, std::string>>& extra_env,
                              const std::function<void(int, ncclComm_t&)>& fn, int timeout_s = 120,
                              const std::string& log_dir = "") {
  return run_claimed(l, extra_env, [&](int rank, const ncclUniqueId& id) {
    ncclComm_t c = nullptr;
    CHECK_NCCL(ncclCommInitRank(&c, l.nranks(), id, rank));
    fn(rank, c);
    if (c) CHECK_NCCL(ncclCommDestroy(c));
  }, timeout_s, log_dir);
}

// The shared-memory prefix of every segment of a job of our unique id: "pl_nccl" and the first 28
// hex digits of its nonce (bytes 80..95, unique_id.h; peerlink keeps an id's first 32 characters).
inline std::string shm_prefix_of(const ncclUniqueId& id) {
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(id.internal[80 + i]));
  return std::string("pl_nccl") + std::string(hex, 28);
}

}  // namespace mn
