// Starting ranks without MPI: the parent forks one child per rank and only supervises. The parent
// never touches the GPU runtime (CUDA/HIP contexts do not survive fork), so even the device count
// is probed in a short-lived child. Every wait here is bounded; a rank that fails or hangs gets its
// siblings killed (by pid: only processes this parent started) and the run fails.
#pragma once
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "peerlink/device.h"
#include "peerlink/errors.h"
#include "peerlink/options.h"

namespace bench {

// A fresh id per run so concurrent runs (CI, two users) never meet each other's segments. The
// "plbench-" start makes the benchmarks' SHM names (pl_plbench-...) recognisable in leak checks.
inline std::string make_unique_id(const char* tag) {
  std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof buf, "plbench-%s-%d-%08x", tag, static_cast<int>(getpid()), rd());
  return buf;
}

// Memory shared by the parent and every forked child (results, NCCL ids). Created before fork.
template <typename T>
T* shared_anonymous(size_t count = 1) {
  void* p = mmap(nullptr, sizeof(T) * count, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap of shared result area failed");
  std::memset(p, 0, sizeof(T) * count);
  return static_cast<T*>(p);
}

// Runs `body` in a child and returns its exit code (or 128+signal), waiting at most `limit`.
inline int wait_child(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return 255;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return 124;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

// GPU count, asked in a child so this process stays free of a GPU context (safe to fork later).
inline int probe_device_count() {
  if (!peerlink::device::compiled_with_gpu()) return 0;
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    int n = 0;
    try { n = peerlink::device::count(); } catch (...) { n = 0; }
    _exit(n > 250 ? 250 : n);
  }
  int rc = wait_child(pid, std::chrono::steady_clock::now() + std::chrono::seconds(60));
  return rc == 124 || rc > 250 ? 0 : rc;
}

// Forks `n` ranks running body(rank) (its return value is the exit code; exceptions print and
// exit 1). Waits up to `limit` overall; when a rank fails, the others get `grace` to finish (they
// see PeerLostError) and are then killed. Returns 0 when every rank exited 0, else the first
// failing rank's code.
inline int fork_ranks(int n, const std::function<int(int)>& body, std::chrono::seconds limit,
                      std::chrono::seconds grace = std::chrono::seconds(5)) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      std::fprintf(stderr, "fork of rank %d failed: %s\n", r, std::strerror(errno));
      return 1;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphan ranks when the supervisor dies
      signal(SIGPIPE, SIG_IGN);  // output piped into `head` must not kill a rank before its cleanup
      int rc = 1;
      try {
        rc = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        rc = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<int> rcs(n, -1);
  int first_bad = 0;
  int remaining = n;
  while (remaining > 0) {
    for (int r = 0; r < n; ++r) {
      if (rcs[r] >= 0) continue;
      int status = 0;
      pid_t w = waitpid(pids[r], &status, WNOHANG);
      if (w != pids[r]) continue;
      rcs[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
      --remaining;
      if (rcs[r] != 0 && first_bad == 0) {
        first_bad = rcs[r];
        std::fprintf(stderr, "rank %d exited with %d\n", r, rcs[r]);
        auto g = std::chrono::steady_clock::now() + grace;
        if (g < deadline) deadline = g;
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (rcs[r] < 0) {
          std::fprintf(stderr, "rank %d did not finish in time: killed\n", r);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          rcs[r] = 124;
          if (first_bad == 0) first_bad = 124;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return first_bad;
}

// --threads: the `n` ranks as n threads of one forked child (the parent still never touches the GPU
// runtime). On one GPU that is the single-GPU stand-in for a pair or a group: the ranks' kernels
// run at once (one context), where two processes on one GPU time-slice. Nothing a rank does between
// its collectives may wait for the whole device: in one context that waits for another rank's
// kernel, which waits for this rank. (A device::copy_sync that synchronized the device stalled
// bench_allreduce / bench_collectives at their second size on one H200; it waits for its own copy
// only.) A rank's exception is printed and counts as exit code 1; returns the first non-zero code
// in rank order, after every thread ended.
inline int thread_ranks(int n, const std::function<int(int)>& body, std::chrono::seconds limit) {
  return fork_ranks(
      1,
      [&](int) {
        std::vector<int> rcs(static_cast<size_t>(n), 1);
        auto guarded = [&](int r) {
          try {
            rcs[static_cast<size_t>(r)] = body(r);
          } catch (const std::exception& e) {
            std::fprintf(stderr, "rank %d: %s\n", r, e.what());
          }
        };
        std::vector<std::thread> ts;
        for (int r = 1; r < n; ++r) ts.emplace_back(guarded, r);
        guarded(0);
        for (auto& t : ts) t.join();
        for (int rc : rcs)
          if (rc) return rc;
        return 0;
      },
      limit);
}

// True when some device hosts two ranks (NCCL refuses that: the benchmarks drop their NCCL columns).
inline bool devices_repeat(std::vector<int> devs) {
  std::sort(devs.begin(), devs.end());
  return std::adjacent_find(devs.begin(), devs.end()) != devs.end();
}

// The device of each rank of the collective benchmarks: --gpus as given (-g, when set, must agree),
// else -g ranks (default: every GPU up to 8, at least 2) spread round robin over the GPUs, or on
// the host backend when there is none.
inline std::vector<int> rank_devices(int nranks, const std::vector<int>& gpus) {
  if (!gpus.empty()) {
    if (nranks && nranks != static_cast<int>(gpus.size()))
      throw UsageError("-g " + std::to_string(nranks) + " disagrees with --gpus (" + std::to_string(gpus.size()) +
                       " devices)");
    return gpus;
  }
  int d = probe_device_count();
  int n = nranks ? nranks : (d >= 2 ? std::min(d, 8) : 2);
  std::vector<int> devs(n);
  for (int r = 0; r < n; ++r) devs[r] = d > 0 ? r % d : peerlink::kHostDevice;
  return devs;
}

}  // namespace bench
