// Simulated nodes on one GPU through libnccl.so.2 against the real NCCL (scripts/gpu_multinode.sh):
// forked ranks, PEERLINK_HOSTID groups them into nodes (peerlink inside each), a distinct
// NCCL_HOSTID per rank lets the real NCCL accept several ranks on one GPU (it refuses two ranks of
// one host on one GPU) and carries what crosses nodes. Every op eager (two-level and whole-on-the-
// engine sizes, in and out of place), a captured graph replayed with new inputs, splits by node
// and by local index; payloads checked on the host. One line per check and rank: PASS / FAIL.
//
//   nccl_multinode_gpu --nodes 2 --per-node 2 [--device 0] [--timeout 240]
// Needs PEERLINK_NCCL_LIBRARY (the real libnccl.so.2) and NCCL_SOCKET_IFNAME=lo on a machine
// without a network; sets PEERLINK_HIER_MIN_BYTES=1 unless given (the plans on every size).
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

#define NC(call)                                                                                            \
  do {                                                                                                      \
    ncclResult_t r_ = (call);                                                                               \
    if (r_ != ncclSuccess)                                                                                  \
      throw std::runtime_error(std::string(#call) + ": " + ncclGetErrorString(r_) + ": " + ncclGetLastError(nullptr)); \
  } while (0)
#define CU(call)                                                                                          \
  do {                                                                                                    \
    cudaError_t e_ = (call);                                                                              \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

struct Shared {
  std::atomic<int> ready;
  ncclUniqueId id;
};

int g_rank = 0, g_n = 0, g_per = 1, g_failed = 0;
ncclComm_t g_comm = nullptr;
cudaStream_t g_stream = nullptr;

float val(int r, size_t i, int seed) { return static_cast<float>((r * 7 + i * 3 + seed) % 11 + 1); }

// A device buffer of floats.
struct Dev {
  float* p = nullptr;
  size_t n = 0;
  // Filled with NaN (all bits set), so an element nothing wrote never equals what a check expects.
  explicit Dev(size_t count) : n(count) {
    CU(cudaMalloc(&p, count * sizeof(float) + 16));
    CU(cudaMemsetAsync(p, 0xff, count * sizeof(float) + 16, g_stream));
  }
  ~Dev() { cudaFree(p); }
  // On the stream the ops use: a plain cudaMemcpy from pageable memory may return before its DMA
  // lands, and g_stream (non-blocking) does not wait for the legacy stream, so an op could read the
  // previous contents.
  void put(const std::vector<float>& h) {
    CU(cudaMemcpyAsync(p, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice, g_stream));
    CU(cudaStreamSynchronize(g_stream));
  }
  std::vector<float> get(size_t count) const {
    std::vector<float> h(count);
    CU(cudaMemcpyAsync(h.data(), p, count * sizeof(float), cudaMemcpyDeviceToHost, g_stream));
    CU(cudaStreamSynchronize(g_stream));
    return h;
  }
};

std::vector<float> pattern(size_t count, int rank, int seed, size_t offset = 0) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = val(rank, offset + i, seed);
  return v;
}

void expect(const std::vector<float>& got, const std::function<float(size_t)>& want, const char* what) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want(i))
      throw std::runtime_error(std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                               ", expected " + std::to_string(want(i)));
}

void check(const char* name, const std::function<void()>& body) {
  try {
    body();
    std::printf("rank %d: %s: PASS\n", g_rank, name);
  } catch (const std::exception& e) {
    std::printf("rank %d: %s: FAIL (%s)\n", g_rank, name, e.what());
    g_failed = 1;
  }
  std::fflush(stdout);
}

void sync() { CU(cudaStreamSynchronize(g_stream)); }

float sum_over(size_t i, int seed, size_t offset = 0) {
  float s = 0;
  for (int q = 0; q < g_n; ++q) s += val(q, offset + i, seed);
  return s;
}

void allreduce(size_t count, bool in_place, int seed) {
  Dev s(count), r(count);
  s.put(pattern(count, g_rank, seed));
  NC(ncclAllReduce(s.p, in_place ? s.p : r.p, count, ncclFloat, ncclSum, g_comm, g_stream));
  sync();
  expect((in_place ? s : r).get(count), [&](size_t i) { return sum_over(i, seed); }, "allreduce");
}

void eager_checks() {
  const size_t L = static_cast<size_t>(g_per);
  check("allreduce two-level size, out of place", [&] { allreduce(L * 4096, false, 1); });
  check("allreduce two-level size, in place", [&] { allreduce(L * 4096, true, 2); });
  check("allreduce odd count (whole on the real NCCL)", [&] { allreduce(L * 4096 + 1, false, 3); });
  check("allreduce int8 (forwarded to the real NCCL)", [&] {
    std::vector<int8_t> h(1000);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<int8_t>((g_rank + i) % 5);
    int8_t *d = nullptr;
    CU(cudaMalloc(&d, h.size()));
    CU(cudaMemcpyAsync(d, h.data(), h.size(), cudaMemcpyHostToDevice, g_stream));
    NC(ncclAllReduce(d, d, h.size(), ncclInt8, ncclSum, g_comm, g_stream));
    CU(cudaMemcpyAsync(h.data(), d, h.size(), cudaMemcpyDeviceToHost, g_stream));
    sync();
    cudaFree(d);
    for (size_t i = 0; i < h.size(); ++i) {
      int want = 0;
      for (int q = 0; q < g_n; ++q) want += static_cast<int>((q + i) % 5);
      if (h[i] != want) throw std::runtime_error("int8 element " + std::to_string(i));
    }
  });
  const size_t rc = 2048;
  check("reduce_scatter", [&] {
    Dev s(rc * g_n), r(rc);
    s.put(pattern(rc * g_n, g_rank, 4));
    NC(ncclReduceScatter(s.p, r.p, rc, ncclFloat, ncclSum, g_comm, g_stream));
    sync();
    expect(r.get(rc), [&](size_t i) { return sum_over(i, 4, g_rank * rc); }, "reduce_scatter");
  });
  check("all_gather", [&] {
    Dev s(rc), r(rc * g_n);
    s.put(pattern(rc, g_rank, 5));
    NC(ncclAllGather(s.p, r.p, rc, ncclFloat, g_comm, g_stream));
    sync();
    expect(r.get(rc * g_n), [&](size_t i) { return val(static_cast<int>(i / rc), i % rc, 5); }, "all_gather");
  });
  for (int root : {g_n - 1, 1 % g_n}) {
    check(root == g_n - 1 ? "broadcast from the last rank" : "broadcast from rank 1", [&] {
      Dev b(L * 2048);
      b.put(pattern(L * 2048, g_rank, 6));
      NC(ncclBroadcast(b.p, b.p, L * 2048, ncclFloat, root, g_comm, g_stream));
      sync();
      expect(b.get(L * 2048), [&](size_t i) { return val(root, i, 6); }, "broadcast");
    });
    check(root == g_n - 1 ? "reduce to the last rank" : "reduce to rank 1", [&] {
      Dev s(L * 2048), r(L * 2048);
      s.put(pattern(L * 2048, g_rank, 7));
      NC(ncclReduce(s.p, r.p, L * 2048, ncclFloat, ncclSum, root, g_comm, g_stream));
      sync();
      if (g_rank == root) expect(r.get(L * 2048), [&](size_t i) { return sum_over(i, 7); }, "reduce");
    });
  }
  check("alltoall", [&] {
    const size_t c = 1000;
    Dev s(c * g_n), r(c * g_n);
    s.put(pattern(c * g_n, g_rank, 8));
    NC(ncclAlltoAll(s.p, r.p, c, ncclFloat, g_comm, g_stream));
    sync();
    expect(r.get(c * g_n), [&](size_t i) { return val(static_cast<int>(i / c), g_rank * c + i % c, 8); }, "alltoall");
  });
  // One group of send/recv with the peers `with` accepts (payloads per peer), then the same with
  // only this rank itself and with everyone but itself: a failure of the whole says which part.
  auto pairs = [&](const char* name, const std::function<bool(int)>& with) {
    check(name, [&] {
      const size_t c = 777;
      std::vector<std::unique_ptr<Dev>> out, in;
      for (int q = 0; q < g_n; ++q) {
        out.push_back(std::make_unique<Dev>(c));
        in.push_back(std::make_unique<Dev>(c));
        out.back()->put(pattern(c, g_rank, 20 + q));
      }
      NC(ncclGroupStart());
      for (int q = 0; q < g_n; ++q) {
        if (!with(q)) continue;
        NC(ncclSend(out[q]->p, c, ncclFloat, q, g_comm, g_stream));
        NC(ncclRecv(in[q]->p, c, ncclFloat, q, g_comm, g_stream));
      }
      NC(ncclGroupEnd());
      sync();
      for (int q = 0; q < g_n; ++q) {
        if (!with(q)) continue;
        const std::string from = "send/recv from rank " + std::to_string(q);
        expect(in[q]->get(c), [&](size_t i) { return val(q, i, 20 + g_rank); }, from.c_str());
      }
    });
  };
  pairs("send/recv all pairs (within and across nodes) in one group", [](int) { return true; });
  pairs("send/recv with itself alone in a group", [](int q) { return q == g_rank; });
  pairs("send/recv with every other rank in one group", [](int q) { return q != g_rank; });
}

// One graph: a two-level allreduce, an all_gather, a reduce_scatter and a ring of send/recv,
// replayed twice with new inputs written into the captured buffers.
void graph_checks() {
  check("graph: allreduce + all_gather + reduce_scatter + ring, replayed twice", [&] {
    const size_t L = static_cast<size_t>(g_per), count = L * 4096, rc = 1024, c = 555;
    Dev a(count), gs(rc), gr(rc * g_n), rs(rc * g_n), rr(rc), ps(c), pr(c);
    const int next = (g_rank + 1) % g_n, prev = (g_rank + g_n - 1) % g_n;
    auto run = [&] {
      NC(ncclAllReduce(a.p, a.p, count, ncclFloat, ncclSum, g_comm, g_stream));
      NC(ncclAllGather(gs.p, gr.p, rc, ncclFloat, g_comm, g_stream));
      NC(ncclReduceScatter(rs.p, rr.p, rc, ncclFloat, ncclSum, g_comm, g_stream));
      NC(ncclGroupStart());
      NC(ncclSend(ps.p, c, ncclFloat, next, g_comm, g_stream));
      NC(ncclRecv(pr.p, c, ncclFloat, prev, g_comm, g_stream));
      NC(ncclGroupEnd());
    };
    auto fill = [&](int seed) {
      a.put(pattern(count, g_rank, seed));
      gs.put(pattern(rc, g_rank, seed + 1));
      rs.put(pattern(rc * g_n, g_rank, seed + 2));
      ps.put(pattern(c, g_rank, seed + 3));
    };
    auto verify = [&](int seed) {
      expect(a.get(count), [&](size_t i) { return sum_over(i, seed); }, "graph allreduce");
      expect(gr.get(rc * g_n), [&](size_t i) { return val(static_cast<int>(i / rc), i % rc, seed + 1); }, "graph all_gather");
      expect(rr.get(rc), [&](size_t i) { return sum_over(i, seed + 2, g_rank * rc); }, "graph reduce_scatter");
      expect(pr.get(c), [&](size_t i) { return val(prev, i, seed + 3); }, "graph ring");
    };
    fill(30);
    run();  // eager warm-up, as torch does before capturing
    sync();
    verify(30);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CU(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
    run();
    CU(cudaStreamEndCapture(g_stream, &graph));
    CU(cudaGraphInstantiate(&exec, graph, 0));
    for (int seed : {40, 50}) {
      fill(seed);
      CU(cudaGraphLaunch(exec, g_stream));
      sync();
      verify(seed);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  });
}

void split_checks() {
  const int node = g_rank / g_per, local = g_rank % g_per;
  for (int by_node = 1; by_node >= 0; --by_node) {
    check(by_node ? "split by node (one-node children: peerlink only)" : "split by local index (across nodes)", [&] {
      ncclComm_t child = nullptr;
      NC(ncclCommSplit(g_comm, by_node ? node : local, g_rank, &child, nullptr));
      int n = 0, r = -1;
      NC(ncclCommCount(child, &n));
      NC(ncclCommUserRank(child, &r));
      Dev b(4096);
      b.put(pattern(4096, r, 9));
      NC(ncclAllReduce(b.p, b.p, 4096, ncclFloat, ncclSum, child, g_stream));
      sync();
      expect(b.get(4096), [&](size_t i) {
        float s = 0;
        for (int q = 0; q < n; ++q) s += val(q, i, 9);
        return s;
      }, "child allreduce");
      NC(ncclCommDestroy(child));
    });
  }
}

int rank_main(Shared* sh, int rank, int device) {
  g_rank = rank;
  const std::string pid = std::to_string(getppid());
  setenv("PEERLINK_HOSTID", ("gpunode" + std::to_string(rank / g_per) + "-" + pid).c_str(), 1);
  setenv("NCCL_HOSTID", ("gpurank" + std::to_string(rank) + "-" + pid).c_str(), 1);
  setenv("PEERLINK_HIER_MIN_BYTES", "1", 0);
  try {
    CU(cudaSetDevice(device));
    CU(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    if (rank == 0) {
      NC(ncclGetUniqueId(&sh->id));
      sh->ready = 1;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!sh->ready.load()) {
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no unique id");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    NC(ncclCommInitRank(&g_comm, g_n, sh->id, rank));
  } catch (const std::exception& e) {
    std::printf("rank %d: init: FAIL (%s)\n", rank, e.what());
    return 1;
  }
  std::printf("rank %d: init: PASS\n", rank);
  eager_checks();
  graph_checks();
  split_checks();
  check("destroy", [&] { NC(ncclCommDestroy(g_comm)); });
  return g_failed;
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 2, device = 0, timeout = 240;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--nodes") nodes = std::atoi(argv[i + 1]);
    else if (a == "--per-node") g_per = std::atoi(argv[i + 1]);
    else if (a == "--device") device = std::atoi(argv[i + 1]);
    else if (a == "--timeout") timeout = std::atoi(argv[i + 1]);
  }
  g_n = nodes * g_per;
  if (nodes < 1 || g_per < 1 || g_n > 16) {
    std::fprintf(stderr, "usage: %s --nodes N --per-node L [--device D] [--timeout S]\n", argv[0]);
    return 2;
  }
  // No CUDA call before the fork: every rank makes its own context.
  auto* sh = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  sh->ready = 0;
  std::vector<pid_t> pids;
  for (int r = 0; r < g_n; ++r) {
    pid_t p = fork();
    if (p == 0) _exit(rank_main(sh, r, device));
    pids.push_back(p);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout);
  int bad = 0;
  for (size_t r = 0; r < pids.size(); ++r) {
    int st = 0;
    while (waitpid(pids[r], &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t q : pids) kill(q, SIGKILL);
        std::printf("rank %zu: HUNG (killed after %d s)\n", r, timeout);
        waitpid(pids[r], &st, 0);
        bad = 1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    bad |= !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  std::printf("multinode gpu %d nodes x %d ranks: %s\n", nodes, g_per, bad ? "FAILED" : "ALL PASS");
  return bad;
}
