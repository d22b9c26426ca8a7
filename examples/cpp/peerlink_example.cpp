// A two-process peerlink program on the host backend (no GPU needed): rank 1 publishes a receive
// buffer, rank 0 sends into it directly, rank 1 receives it with irecv, then both allreduce a vector.
// Every payload is checked. Build it against an installed peerlink (see README.md here):
//   g++ -std=c++17 peerlink_example.cpp $(pkg-config --cflags --libs peerlink) -o peerlink_example
//   or CMake: find_package(peerlink) and target_link_libraries(... peerlink::peerlink)
// Run: ./peerlink_example [unique-id]. The process forks its second rank itself; a real job starts
// one process per rank (a launcher, or torchrun) with the same unique id and its own rank.
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <peerlink/peerlink.h>

namespace {

constexpr uint32_t kBufId = 7;      // the receiver's name for its buffer
constexpr uint64_t kVersion = 1;    // its publication's version (> 0: the direct path)
constexpr size_t kCount = 1 << 16;  // int32 elements sent (256 KiB)

int32_t pattern(size_t i) { return static_cast<int32_t>((i * 2654435761u) % 1000003); }

// Returns the number of wrong values this rank saw.
size_t run_rank(const std::string& uid, int rank) {
  peerlink::Options opts = peerlink::Options::from_env();  // PEERLINK_* variables, if any
  opts.timeout = std::chrono::seconds(30);
  peerlink::Communicator comm(uid, rank, 2, peerlink::kHostDevice, opts);
  size_t wrong = 0;

  // Point to point: rank 1 publishes buffer kBufId, rank 0 copies straight into it.
  const size_t bytes = kCount * sizeof(int32_t);
  if (rank == 1) {
    auto* buf = static_cast<int32_t*>(comm.alloc(bytes));  // exportable memory (host SHM here)
    std::memset(buf, 0, bytes);
    comm.notify_ipc_buffer(0, kBufId, buf, bytes, kVersion);
    peerlink::Request r = comm.irecv(0, kBufId, 0, bytes);
    r.wait();
    for (size_t i = 0; i < kCount; ++i) wrong += buf[i] != pattern(i);
    comm.free(buf);
  } else {
    std::vector<int32_t> src(kCount);
    for (size_t i = 0; i < kCount; ++i) src[i] = pattern(i);
    comm.wait_ipc_buffer(1, kBufId, kVersion);
    comm.send_direct(1, src.data(), bytes, kBufId, kVersion);
  }

  // A collective: every rank contributes (rank + 1) * (i + 1); the sum is 3 * (i + 1).
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float((rank + 1) * (i + 1));
  peerlink::allreduce(comm, v.data(), v.data(), v.size(), peerlink::DataType::F32, peerlink::ReduceOp::Sum);
  for (size_t i = 0; i < v.size(); ++i) wrong += v[i] != float(3 * (i + 1));

  comm.barrier();
  return wrong;
}

int rank_main(const std::string& uid, int rank) {
  try {
    size_t wrong = run_rank(uid, rank);
    std::printf("rank %d: %s (%zu wrong values)\n", rank, wrong ? "FAILED" : "ok", wrong);
    return wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string uid = argc > 1 ? argv[1] : "peerlink-example-" + std::to_string(getpid());
  std::fflush(stdout);
  pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) _exit(rank_main(uid, 1));
  int rc = rank_main(uid, 0);
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  std::printf("peerlink example: %s\n", rc == 0 ? "PASS" : "FAIL");
  return rc;
}
