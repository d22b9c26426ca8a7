// Shared by the NCCL C API tests (tests/nccl/*_test.cpp, one binary linking the shim as an NCCL
// program does): result checks that throw with the call and ncclGetLastError, fork-based ranks
// whose failures come back as text, and a fresh unique id.
#pragma once
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#define CHECK_NCCL(call)                                                                                 \
  do {                                                                                                   \
    ncclResult_t r_ = (call);                                                                            \
    if (r_ != ncclSuccess)                                                                               \
      throw std::runtime_error(std::string(#call) + " -> " + ncclGetErrorString(r_) + ": " +             \
                               ncclGetLastError(nullptr) + " (line " + std::to_string(__LINE__) + ")"); \
  } while (0)
#define CHECK(cond)                                                                                      \
  do {                                                                                                   \
    if (!(cond)) throw std::runtime_error(std::string("check failed: ") + #cond + " (line " +            \
                                          std::to_string(__LINE__) + ")");                               \
  } while (0)

// Runs fn(rank) in `n` forked processes; returns "" or what failed.
inline std::string run_ranks(int n, const std::function<void(int)>& fn, int timeout_s = 90) {
  std::vector<pid_t> pids;
  int pipes[2];
  if (pipe(pipes) != 0) return "pipe failed";
  for (int r = 0; r < n; ++r) {
    pid_t p = fork();
    if (p == 0) {
      close(pipes[0]);
      std::string err;
      try {
        fn(r);
      } catch (const std::exception& e) {
        err = "rank " + std::to_string(r) + ": " + e.what() + "\n";
      }
      if (!err.empty()) (void)!write(pipes[1], err.data(), err.size());
      _exit(err.empty() ? 0 : 1);
    }
    pids.push_back(p);
  }
  close(pipes[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  std::string failed;
  for (pid_t p : pids) {
    int st = 0;
    while (waitpid(p, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(p, SIGKILL);
        waitpid(p, &st, 0);
        failed += "a rank timed out\n";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL) failed += "a rank died of signal " + std::to_string(WTERMSIG(st)) + "\n";
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0 && failed.empty()) failed += "a rank exited " + std::to_string(WEXITSTATUS(st)) + "\n";
  }
  char buf[4096];
  ssize_t k;
  while ((k = read(pipes[0], buf, sizeof buf)) > 0) failed.append(buf, static_cast<size_t>(k));
  close(pipes[0]);
  return failed;
}

inline ncclUniqueId new_id() {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) throw std::runtime_error("ncclGetUniqueId failed");
  return id;
}

