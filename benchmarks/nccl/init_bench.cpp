// Communicator creation time through libnccl.so.2 (the NCCL C API, as a program sees it):
// ncclGetUniqueId on rank 0, then ncclCommInitRank on every rank, timed from a common start to the
// slowest rank's return, then ncclCommDestroy. Ranks are forked processes of this host.
//
//   nccl_init_bench [-n 2,8] [-i 30]
// On the host backend: PEERLINK_NCCL_HOST_BACKEND=1 nccl_init_bench. Prints one row per rank count:
// median, p10, p90 and min over iterations of the slowest rank's ncclCommInitRank, in ms (the
// first iteration is a warm-up and not counted), and the same for ncclGetUniqueId on rank 0.
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kMaxRanks = 64;
constexpr int kMaxIters = 1000;

struct Shared {
  pthread_barrier_t bar;
  ncclUniqueId id;
  double init_ms[kMaxIters][kMaxRanks];
  double id_ms[kMaxIters];
  int failed;
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void rank_main(Shared* s, int rank, int n, int iters) {
  alarm(300);  // a stuck rank never holds the benchmark forever
  for (int it = 0; it < iters; ++it) {
    pthread_barrier_wait(&s->bar);
    if (rank == 0) {
      double t0 = now_ms();
      if (ncclGetUniqueId(&s->id) != ncclSuccess) s->failed = 1;
      s->id_ms[it] = now_ms() - t0;
    }
    pthread_barrier_wait(&s->bar);
    ncclUniqueId id = s->id;
    double t0 = now_ms();
    ncclComm_t c = nullptr;
    ncclResult_t r = ncclCommInitRank(&c, n, id, rank);
    s->init_ms[it][rank] = now_ms() - t0;
    if (r != ncclSuccess) {
      std::fprintf(stderr, "rank %d: ncclCommInitRank: %s: %s\n", rank, ncclGetErrorString(r), ncclGetLastError(nullptr));
      s->failed = 1;
    }
    pthread_barrier_wait(&s->bar);
    if (c) ncclCommDestroy(c);
  }
}

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int run(int n, int iters) {
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  auto* s = static_cast<Shared*>(mem);
  std::memset(s, 0, sizeof *s);
  pthread_barrierattr_t a;
  pthread_barrierattr_init(&a);
  pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&s->bar, &a, static_cast<unsigned>(n));
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t p = fork();
    if (p == 0) {
      rank_main(s, r, n, iters);
      _exit(0);
    }
    pids.push_back(p);
  }
  int bad = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    bad |= !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  if (bad || s->failed) {
    std::fprintf(stderr, "%d ranks: a rank failed\n", n);
    return 1;
  }
  std::vector<double> slowest, ids;
  for (int it = 1; it < iters; ++it) {
    double m = 0;
    for (int r = 0; r < n; ++r) m = std::max(m, s->init_ms[it][r]);
    slowest.push_back(m);
    ids.push_back(s->id_ms[it]);
  }
  std::printf("| %5d | %5d | %8.2f | %8.2f | %8.2f | %8.2f | %8.3f |\n", n, iters - 1, pct(slowest, 0.5),
              pct(slowest, 0.1), pct(slowest, 0.9), pct(slowest, 0.0), pct(ids, 0.5));
  std::fflush(stdout);
  munmap(mem, sizeof(Shared));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string ranks = "2,8";
  int iters = 30;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-n" && i + 1 < argc) ranks = argv[++i];
    else if (a == "-i" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [-n 2,8] [-i 30]\n", argv[0]);
      return 2;
    }
  }
  iters = std::max(2, std::min(iters, kMaxIters));
  std::printf("| ranks | iters | init median ms | p10 | p90 | min | ncclGetUniqueId median ms |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  int rc = 0;
  size_t at = 0;
  while (at < ranks.size()) {
    size_t comma = ranks.find(',', at);
    int n = std::atoi(ranks.substr(at, comma == std::string::npos ? std::string::npos : comma - at).c_str());
    if (n >= 1 && n <= kMaxRanks) rc |= run(n, iters);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return rc;
}
