// Allreduce timing sweep on 2 GPUs (one process per GPU, forked here): per algorithm and size, the
// time per call back-to-back on one stream (CUDA events), eagerly launched and replayed from a
// CUDA graph, and busbw. Every timed configuration's output is checked (bf16 1+2 = 3).
// Built and run by scripts/gpu_collectives.sh (CUDA only):
//   allreduce_sweep [algos=oneshot,twoshot,bandwidth,auto] [min_bytes=8] [max_bytes=268435456]
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "peerlink/peerlink.h"

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(3);                                                                         \
    }                                                                                       \
  } while (0)

static int run_rank(int rank, const std::string& uid, const std::vector<std::string>& algos, size_t lo, size_t hi) {
  CK(cudaSetDevice(rank));
  std::vector<uint16_t> host(hi / 2, rank == 0 ? 0x3f80 : 0x4000);  // bf16 1.0 / 2.0
  void *in, *out;
  CK(cudaMalloc(&in, hi));
  CK(cudaMalloc(&out, hi));
  CK(cudaMemcpy(in, host.data(), hi, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const char* blocks = std::getenv("PEERLINK_ALLREDUCE_BLOCKS");
  {  // host cost of the runtime calls an eager allreduce makes besides the launch
    using C = std::chrono::steady_clock;
    const int n = 2000;
    auto t0 = C::now();
    for (int k = 0; k < n; ++k) CK(cudaEventRecord(e0, s));
    auto t1 = C::now();
    cudaStreamCaptureStatus cs;
    for (int k = 0; k < n; ++k) CK(cudaStreamIsCapturing(s, &cs));
    auto t2 = C::now();
    CK(cudaStreamSynchronize(s));
    if (rank == 0)
      std::printf("# host cost per call: cudaEventRecord %.3f us, cudaStreamIsCapturing %.3f us\n",
                  std::chrono::duration<double, std::micro>(t1 - t0).count() / n,
                  std::chrono::duration<double, std::micro>(t2 - t1).count() / n);
  }
  for (const std::string& algo : algos) {
    peerlink::Options o = peerlink::Options::from_env();
    o.allreduce_algo = algo == "auto" ? "" : algo;
    peerlink::Communicator comm(uid + algo, rank, 2, rank, o);
    for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
      size_t count = bytes / 2;
      int iters = bytes <= (1 << 20) ? 200 : bytes <= (16 << 20) ? 40 : 10;
      for (int k = 0; k < 5; ++k) peerlink::allreduce(comm, in, out, count, peerlink::DataType::BF16, peerlink::ReduceOp::Sum, s);
      CK(cudaStreamSynchronize(s));
      comm.barrier();
      CK(cudaEventRecord(e0, s));
      auto h0 = std::chrono::steady_clock::now();
      for (int k = 0; k < iters; ++k) peerlink::allreduce(comm, in, out, count, peerlink::DataType::BF16, peerlink::ReduceOp::Sum, s);
      double us_host = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() / iters;
      CK(cudaEventRecord(e1, s));
      CK(cudaStreamSynchronize(s));
      float ms_eager = 0;
      CK(cudaEventElapsedTime(&ms_eager, e0, e1));
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int k = 0; k < iters; ++k) peerlink::allreduce(comm, in, out, count, peerlink::DataType::BF16, peerlink::ReduceOp::Sum, s);
      CK(cudaStreamEndCapture(s, &g));
      CK(cudaGraphInstantiateWithFlags(&ge, g, 0));
      CK(cudaGraphLaunch(ge, s));
      CK(cudaStreamSynchronize(s));
      comm.barrier();
      CK(cudaEventRecord(e0, s));
      CK(cudaGraphLaunch(ge, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaStreamSynchronize(s));
      float ms_graph = 0;
      CK(cudaEventElapsedTime(&ms_graph, e0, e1));
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
      peerlink::allreduce_check(comm);
      uint16_t first = 0, last = 0;
      CK(cudaMemcpy(&first, out, 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(&last, static_cast<char*>(out) + (count - 1) * 2, 2, cudaMemcpyDeviceToHost));
      bool ok = first == 0x4040 && last == 0x4040;
      double us_e = ms_eager * 1000.0 / iters, us_g = ms_graph * 1000.0 / iters;
      if (rank == 0)
        std::printf("%-9s blocks=%-4s %10zu B  eager %9.2f us (host %6.2f)  graph %9.2f us  busbw(graph) %7.1f GB/s  %s  [%s]\n",
                    algo.c_str(), blocks ? blocks : "auto", bytes, us_e, us_host, us_g, bytes / (us_g * 1e3),
                    ok ? "ok" : "WRONG", peerlink::to_string(peerlink::allreduce_algo_for(comm, bytes)));
      std::fflush(stdout);
      if (!ok) return 4;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  std::vector<std::string> algos;
  std::stringstream ss(argc > 1 ? argv[1] : "oneshot,twoshot,bandwidth,auto");
  for (std::string a; std::getline(ss, a, ',');) algos.push_back(a);
  size_t lo = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 8;
  size_t hi = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : (size_t(256) << 20);
  std::string uid = "sweep-" + std::to_string(getpid());
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      int rc = 1;
      try {
        rc = run_rank(r, uid, algos, lo, hi);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
  }
  int bad = 0;
  for (int r = 0; r < 2; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
  }
  return bad;
}
