// Fork-based multi-process test harness: runs a function as N ranks in N real processes and
// reports which ranks failed and why. Children report through exceptions (MP_CHECK), since gtest
// assertions in a child process do not reach the parent.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <signal.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "common/shm_segment.h"

namespace pltest {

#define MP_CHECK(cond)                                                                                 \
  do {                                                                                                 \
    if (!(cond)) throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +    \
                                          ": check failed: " #cond);                                   \
  } while (0)

#define MP_CHECK_MSG(cond, msg)                                                                        \
  do {                                                                                                 \
    if (!(cond)) {                                                                                     \
      std::ostringstream os_;                                                                          \
      os_ << __FILE__ << ":" << __LINE__ << ": check failed: " #cond ": " << msg;                      \
      throw std::runtime_error(os_.str());                                                             \
    }                                                                                                  \
  } while (0)

// Runs `stmt`, requires it to throw `Type` whose message contains every string of `parts`.
#define MP_CHECK_THROWS(stmt, Type, ...)                                                                \
  do {                                                                                                 \
    bool thrown_ = false;                                                                              \
    try {                                                                                              \
      stmt;                                                                                            \
    } catch (const Type& e_) {                                                                         \
      thrown_ = true;                                                                                  \
      for (const char* part_ : std::vector<const char*>{__VA_ARGS__})                                  \
        MP_CHECK_MSG(std::string(e_.what()).find(part_) != std::string::npos,                          \
                     "message '" << e_.what() << "' lacks '" << part_ << "'");                         \
    }                                                                                                  \
    MP_CHECK_MSG(thrown_, #stmt " did not throw " #Type);                                              \
  } while (0)

// Ids start with the test run's tag (PEERLINK_TEST_RUN, exported by `make test`), so the leak check
// (scripts/check_shm_clean.sh) looks only at this run's segments, not at other jobs on the machine.
// The tag comes first: shm_prefix_for keeps only the id's first 32 characters.
inline std::string unique_test_id(const std::string& name) {
  static std::atomic<int> counter{0};
  const char* run = std::getenv("PEERLINK_TEST_RUN");
  std::string tag = run && *run ? std::string(run) : std::string("t");
  return tag + "-" + name + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// Ranks 0 and 1 as two threads of this process (rank 1 on a thread of its own): what each threw,
// "" when nothing.
inline std::array<std::string, 2> run_thread_pair(const std::function<void(int)>& fn) {
  std::array<std::string, 2> err;
  auto rank_main = [&](int r) {
    try {
      fn(r);
    } catch (const std::exception& e) {
      err[size_t(r)] = e.what();
    }
  };
  std::thread t1(rank_main, 1);
  rank_main(0);
  t1.join();
  return err;
}

struct RankOutcome {
  int rank;
  int status;  // waitpid status
};

// Forks `n` ranks running fn(rank). Returns "" when all exited 0, else a description of failures.
// Ranks still running at `limit` are killed (a hang is a failure, never a stuck suite).
inline std::string run_ranks(int n, const std::function<void(int)>& fn,
                             std::chrono::milliseconds limit = std::chrono::milliseconds(60000),
                             const std::vector<int>& expect_killed = {}) {
  std::vector<pid_t> pids(n, -1);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        fn(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d] FAILED: %s\n", r, e.what());
        code = 1;
      } catch (...) {
        std::fprintf(stderr, "[rank %d] FAILED: unknown exception\n", r);
        code = 1;
      }
      std::fflush(stderr);
      _exit(code);
    }
    pids[r] = pid;
  }
  std::string failures;
  auto deadline = std::chrono::steady_clock::now() + limit;
  int left = n;
  std::vector<bool> done(n, false);
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      int st = 0;
      pid_t w = waitpid(pids[r], &st, WNOHANG);
      if (w == pids[r]) {
        done[r] = true;
        --left;
        bool expected_kill = false;
        for (int k : expect_killed) expected_kill |= (k == r);
        if (expected_kill) continue;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
          failures += "rank " + std::to_string(r) +
                      (WIFSIGNALED(st) ? " killed by signal " + std::to_string(WTERMSIG(st))
                                       : " exited with " + std::to_string(WEXITSTATUS(st))) + "; ";
        }
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (!done[r]) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          failures += "rank " + std::to_string(r) + " hung (killed after limit); ";
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return failures;
}

// Deterministic non-zero pattern: byte i of message `tag`.
inline unsigned char pattern_byte(uint64_t tag, size_t i) {
  uint64_t x = (tag + 1) * 0x9E3779B97F4A7C15ULL + i * 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 29;
  unsigned char b = static_cast<unsigned char>(x);
  return b == 0 ? 0x5A : b;
}
inline void fill_pattern(void* p, size_t n, uint64_t tag) {
  auto* c = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) c[i] = pattern_byte(tag, i);
}
// Returns the first mismatching index or SIZE_MAX.
inline size_t check_pattern(const void* p, size_t n, uint64_t tag) {
  auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    if (c[i] != pattern_byte(tag, i)) return i;
  return SIZE_MAX;
}

// Segments of this test id left in /dev/shm.
inline std::vector<std::string> leftover_segments(const std::string& uid) {
  return peerlink::common::list_segments(peerlink::common::shm_prefix_for(uid));
}

}  // namespace pltest
