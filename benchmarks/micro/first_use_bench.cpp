// First-use cost of a peer allocation exported by legacy handle vs by file descriptor,
// and the steady-state send_direct into each kind of destination.
//
//   BM_FirstUseMap/<kind>/<chunks>: one process exports fresh 64 MB allocations, another times
//     Backend::open (fetch the handle's descriptors, import, reserve, map, set access) of each.
//     kind 0 = legacy (GPU: cudaMalloc + cudaIpcOpenMemHandle; host: a named SHM segment),
//     kind 1 = by descriptor (GPU: 64 MB in <chunks> VMM chunks exported as POSIX fds, as PyTorch's
//     expandable segments make them; host: memfd chunks). Counters: open_us (median of the rounds,
//     whole allocation), per_chunk_us, chunks, min_us; the mapping is checked at every chunk start
//     and at the end. Host backend: 8 MB allocations.
//   BM_SteadySendDirect/<kind>: two communicators in two processes, send_direct into a published
//     destination of that kind: p50 of 8-byte sends (us) and GB/s of the large size (median),
//     payload verified after timing (wrong = bytes that differ).
//
// Devices: PEERLINK_BENCH_DEVICES=0,1 (or 0,0); unset = host backend (-1,-1: CI runs it, large
// size 16 MB there, 256 MB on GPUs). Every measurement runs in forked children: CUDA is never
// initialised in the benchmark's own process, so each run can fork again.
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gpu/backend.h"
#include "gpu/owners.h"
#include "gpu/runtime.h"
#include "gpu/vmm.h"
#include "peerlink/peerlink.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMB = size_t(1) << 20;
constexpr int kRounds = 8;

std::vector<int> bench_devices();
// Bytes of each first-use allocation: 64 MB on GPUs (the legacy figure to compare:
// cudaIpcOpenMemHandle 187 us for 64 MB), 8 MB on the host backend (CI's /dev/shm may be small).
size_t first_use_bytes() { return bench_devices()[0] >= 0 ? 64 * kMB : 8 * kMB; }

std::vector<int> bench_devices() {
  const char* v = std::getenv("PEERLINK_BENCH_DEVICES");
  std::string s = v && *v ? v : "-1,-1";
  size_t comma = s.find(',');
  if (comma == std::string::npos) return {std::atoi(s.c_str()), std::atoi(s.c_str())};
  return {std::atoi(s.substr(0, comma).c_str()), std::atoi(s.substr(comma + 1).c_str())};
}

unsigned char pat(uint64_t tag, size_t i) { return static_cast<unsigned char>((i * 131 + tag * 29) % 251 + 1); }

struct Result {
  double v[4] = {0, 0, 0, 0};
  uint64_t wrong = 0;
  char err[240] = {0};
};

bool read_all(int fd, void* p, size_t n) {
  auto c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t k = read(fd, c, n);
    if (k <= 0) return false;
    c += k;
    n -= size_t(k);
  }
  return true;
}
void write_all(int fd, const void* p, size_t n) {
  auto c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = write(fd, c, n);
    if (k <= 0) return;
    c += k;
    n -= size_t(k);
  }
}

// Forks fn(role, pipes) for roles 0 and 1; role 1 writes a Result to `out`. Bounded: 240 s.
bool run_pair(const std::function<void(int, int[2][2], int)>& fn, Result* res, std::string* why) {
  int p[2][2], out[2];
  if (pipe(p[0]) || pipe(p[1]) || pipe(out)) return *why = "pipe failed", false;
  pid_t pids[2];
  for (int role = 0; role < 2; ++role) {
    pids[role] = fork();
    if (pids[role] == 0) {
      alarm(200);  // a child never outlives a stuck peer
      // Each role keeps only its ends: a dead peer is then EOF, never a hang.
      close(p[role][0]);
      close(p[1 - role][1]);
      close(out[0]);
      Result r;
      try {
        fn(role, p, out[1]);
        _exit(0);
      } catch (const std::exception& e) {
        std::snprintf(r.err, sizeof r.err, "role %d: %s", role, e.what());
      }
      write_all(out[1], &r, sizeof r);
      _exit(1);
    }
  }
  for (int f : {p[0][0], p[0][1], p[1][0], p[1][1], out[1]}) close(f);
  Result r;
  bool got = read_all(out[0], &r, sizeof r);  // EOF when both exited without a result
  auto deadline = Clock::now() + std::chrono::seconds(240);
  for (pid_t pid : pids) {
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
      if (Clock::now() > deadline) kill(pid, SIGKILL);
      usleep(1000);
    }
  }
  close(out[0]);
  if (!got) return *why = "the measuring process died without a result", false;
  *res = r;
  if (r.err[0]) return *why = r.err, false;
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Fills [p, +n) of device `dev` (or host memory) with pattern `tag`.
void fill(int dev, void* p, size_t n, uint64_t tag) {
  std::vector<unsigned char> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = pat(tag, i);
  if (dev < 0) return (void)std::memcpy(p, h.data(), n);
  peerlink::gpu::DeviceGuard g(dev);
  peerlink::gpu::memcpy_sync(p, h.data(), n);
}
// Bytes of [p + off, +n) that differ from pattern `tag` (offsets relative to the pattern start).
uint64_t differ(int dev, const void* p, size_t off, size_t n, uint64_t tag) {
  std::vector<unsigned char> h(n);
  if (dev < 0) {
    std::memcpy(h.data(), static_cast<const char*>(p) + off, n);
  } else {
    peerlink::gpu::DeviceGuard g(dev);
    peerlink::gpu::memcpy_sync(h.data(), static_cast<const char*>(p) + off, n);
  }
  uint64_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += h[i] != pat(tag, off + i);
  return bad;
}

// ---- first use ------------------------------------------------------------------------------

// An allocation of the exporter: legacy (alloc()) or by descriptor (VMM chunks / host memfd).
struct Exported {
  void* p = nullptr;
  peerlink::gpu::MemHandle h;
};

void first_use(int role, int pipes[2][2], int out, int kind, size_t chunk) {
  namespace gpu = peerlink::gpu;
  const size_t total = first_use_bytes();
  std::vector<int> devs = bench_devices();
  const int dev = devs[role];
  const std::string job = "pl_plbench-fu" + std::to_string(getppid()) + "_";
  gpu::BackendOptions bo;
  bo.job_prefix = job;
  bo.host_fd = kind == 1;
  bo.host_chunk_bytes = chunk;
  bo.timeout_ms = 30000;
  if (dev >= 0 && gpu::device_count() <= dev) throw std::runtime_error("device " + std::to_string(dev) + " absent");
  auto be = gpu::make_backend(dev, job + "r" + std::to_string(role) + "_", bo);
  if (role == 0) {  // exporter
    pid_t importer = 0;
    if (!read_all(pipes[1][0], &importer, sizeof importer)) throw std::runtime_error("no importer pid");
    be->set_peer_pids({0, importer});
    std::vector<Exported> ex(kRounds);
    for (auto& e : ex) {
      if (dev >= 0 && kind == 1) {
        gpu::DeviceGuard g(dev);
        e.p = gpu::vmm_test_alloc(dev, chunk, int(total / chunk), true);
      } else {
        e.p = be->alloc(total);
      }
      fill(dev, e.p, total, 7);
      gpu::AllocRange r = be->find_allocation(e.p, total);
      e.h = be->export_allocation(r);
      e.h.owner_pid = getpid();
      write_all(pipes[0][1], &e.h, sizeof e.h);
    }
    char done = 0;
    read_all(pipes[1][0], &done, 1);  // the importer has closed every mapping
    for (auto& e : ex) {
      if (dev >= 0 && kind == 1) {
        gpu::DeviceGuard g(dev);
        gpu::vmm_test_free(e.p, total);
      } else {
        be->free(e.p);
      }
    }
    return;
  }
  if (dev >= 0) be->free(be->alloc(4096));  // the device context exists before anything is timed
  pid_t me = getpid();
  write_all(pipes[1][1], &me, sizeof me);
  std::vector<double> us;
  Result r;
  for (int i = 0; i < kRounds; ++i) {
    gpu::MemHandle h;
    if (!read_all(pipes[0][0], &h, sizeof h)) throw std::runtime_error("exporter gone");
    auto t0 = Clock::now();
    void* base = be->open_from(h, 0);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    size_t step = kind == 1 ? chunk : total;
    for (size_t at = 0; at < total; at += step) r.wrong += differ(dev, base, at, 4096, 7);
    r.wrong += differ(dev, base, total - 4096, 4096, 7);
    be->close(h, base);
  }
  write_all(pipes[1][1], "k", 1);
  r.v[0] = median(us);
  r.v[1] = r.v[0] / double(kind == 1 ? total / chunk : 1);
  r.v[2] = double(kind == 1 ? total / chunk : 1);
  r.v[3] = *std::min_element(us.begin(), us.end());
  write_all(out, &r, sizeof r);
}

void BM_FirstUseMap(benchmark::State& st) {
  const int kind = int(st.range(0));
  const size_t chunk = first_use_bytes() / size_t(st.range(1));
  Result r;
  std::string why;
  for (auto _ : st) {
    if (!run_pair([&](int role, int p[2][2], int out) { first_use(role, p, out, kind, chunk); }, &r, &why)) {
      st.SkipWithError(why.c_str());
      return;
    }
    st.SetIterationTime(r.v[0] * 1e-6);
  }
  if (r.wrong) st.SkipWithError("the mapping does not hold the exporter's bytes");
  st.counters["open_us"] = r.v[0];
  st.counters["min_us"] = r.v[3];
  st.counters["per_chunk_us"] = r.v[1];
  st.counters["chunks"] = r.v[2];
  st.counters["wrong"] = double(r.wrong);
  st.SetLabel(std::string(kind == 1 ? "by descriptor" : "legacy") + (bench_devices()[0] >= 0 ? " (GPU)" : " (host)"));
}
// {kind, chunks}: legacy (one allocation); by descriptor in 32 chunks (GPU: 2 MB, PyTorch's
// small-pool page), 4 chunks (16 MB; 20 MB, the large-pool page, does not divide 64 MB), 1 chunk.
BENCHMARK(BM_FirstUseMap)->Args({0, 1})->Args({1, 32})->Args({1, 4})->Args({1, 1})
    ->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

// ---- steady state ---------------------------------------------------------------------------

void steady(int role, int pipes[2][2], int out, int kind, const std::string& uid) {
  namespace gpu = peerlink::gpu;
  using namespace peerlink;
  const int dev = bench_devices()[role];
  const size_t big = dev >= 0 ? 256 * kMB : 16 * kMB;
  if (dev >= 0 && gpu::device_count() <= dev) throw std::runtime_error("device " + std::to_string(dev) + " absent");
  Options o;
  o.timeout = std::chrono::milliseconds(60000);
  o.host_fd = kind == 1;
  o.host_chunk_bytes = 2 * kMB;
  Communicator c(uid, role, 2, dev, o);
  if (role == 1) {  // receiver: one destination, published once
    void* dst = nullptr;
    size_t vmm_bytes = 0;
    if (dev >= 0 && kind == 1) {
      gpu::DeviceGuard g(dev);
      size_t chunk = gpu::vmm_granularity(dev) * 10;  // 20 MB on 2 MB granularity, as PyTorch's large pool
      vmm_bytes = (big + chunk - 1) / chunk * chunk;
      dst = gpu::vmm_test_alloc(dev, chunk, int(vmm_bytes / chunk), true);
    } else {
      dst = c.alloc(big);
    }
    c.notify_ipc_buffer(0, 1, dst, big, 1);
    c.barrier();  // timing
    c.barrier();  // 8-byte check message landed
    Result r;
    r.wrong = differ(dev, dst, 0, 8, 3);
    c.barrier();
    c.barrier();  // big check message landed
    r.wrong += differ(dev, dst, 0, big, 4);
    CommStats s = c.stats();
    r.v[2] = double(s.exports_fd);
    c.barrier();
    if (vmm_bytes) {
      gpu::DeviceGuard g(dev);
      gpu::vmm_test_free(dst, vmm_bytes);
    } else {
      c.free(dst);
    }
    Result from_sender;
    if (!read_all(pipes[0][0], &from_sender, sizeof from_sender)) throw std::runtime_error("sender gone");
    r.v[0] = from_sender.v[0];
    r.v[1] = from_sender.v[1];
    r.v[3] = from_sender.v[3];
    write_all(out, &r, sizeof r);
    return;
  }
  void* src = c.alloc(big);
  c.wait_ipc_buffer(1, 1, 1);
  fill(dev, src, big, 9);
  std::vector<double> small, large;
  for (int i = 0; i < 1100; ++i) {
    auto t0 = Clock::now();
    c.send_direct(1, src, 8, 1, 1);
    if (i >= 100) small.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  for (int i = 0; i < 12; ++i) {
    auto t0 = Clock::now();
    c.send_direct(1, src, big, 1, 1);
    if (i >= 2) large.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  c.barrier();
  fill(dev, src, 8, 3);
  c.send_direct(1, src, 8, 1, 1);
  c.barrier();
  c.barrier();
  fill(dev, src, big, 4);
  c.send_direct(1, src, big, 1, 1);
  c.barrier();
  Result r;
  r.v[0] = median(small);
  r.v[1] = double(big) / median(large) / 1e9;
  r.v[3] = double(c.stats().opens_fd);
  c.barrier();
  c.free(src);
  write_all(pipes[0][1], &r, sizeof r);
}

void BM_SteadySendDirect(benchmark::State& st) {
  const int kind = int(st.range(0));
  static int run = 0;
  const std::string uid = "plbench-steady-" + std::to_string(getpid()) + "-" + std::to_string(run++);
  Result r;
  std::string why;
  for (auto _ : st) {
    if (!run_pair([&](int role, int p[2][2], int out) { steady(role, p, out, kind, uid); }, &r, &why)) {
      st.SkipWithError(why.c_str());
      return;
    }
    st.SetIterationTime(r.v[0] * 1e-6);
  }
  if (r.wrong) st.SkipWithError("payload check failed after timing");
  if (kind == 1 && (r.v[2] < 1 || r.v[3] < 1)) st.SkipWithError("the destination did not go by descriptor");
  if (kind == 0 && r.v[2] > 0) st.SkipWithError("the legacy destination went by descriptor");
  st.counters["p50_8B_us"] = r.v[0];
  st.counters["big_GBps"] = r.v[1];
  st.counters["wrong"] = double(r.wrong);
  const bool gpu = bench_devices()[0] >= 0;
  st.SetLabel(std::string(kind == 1 ? (gpu ? "VMM destination" : "memfd destination")
                                    : (gpu ? "cudaMalloc destination" : "SHM destination")) +
              (gpu ? ", big = 256 MB" : ", big = 16 MB"));
}
BENCHMARK(BM_SteadySendDirect)->Arg(0)->Arg(1)->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
