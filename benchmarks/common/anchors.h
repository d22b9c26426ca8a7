// Raw anchors of a latency table, measured between the same two ranks in the same run as peerlink's
// rows, so every table carries its own ratios on a noisy machine:
//   flag: rank 0 copies the message into shared memory and stores a sequence number; rank 1 spins
//         on it, answers the same way. No system call: the floor of any shared-memory transport.
//   pipe: the message through a pipe each way, blocking reads: two kernel wake-ups per round trip,
//         what a transport pays that sleeps between messages.
// One-way = round trip / 2, p50 (rank 0's clock). Host memory only, whatever the ranks' devices.
// The shared page and the FIFOs are named after the run's unique id and unlinked once both ranks
// opened them, so an interrupted run leaves nothing behind after setup.
#pragma once
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "peerlink/peerlink.h"
#include "report.h"

namespace bench {

class RawAnchors {
 public:
  // Collective over ranks 0 and 1 of `comm` (barriers). Messages up to `max_bytes`.
  RawAnchors(peerlink::Communicator& comm, const std::string& uid, size_t max_bytes)
      : comm_(comm), me_(comm.rank()), max_(max_bytes) {
    const std::string shm = "/dev/shm/pl_" + uid + "_anchor";
    const std::string fifo[2] = {"/tmp/pl_" + uid + "_p01", "/tmp/pl_" + uid + "_p10"};
    bytes_ = kFlagBytes + 2 * max_;
    if (me_ == 0) {
      int fd = ::open(shm.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes_)) != 0) fail("create " + shm);
      ::close(fd);
      for (const auto& f : fifo)
        if (mkfifo(f.c_str(), 0600) != 0) fail("mkfifo " + f);
    }
    comm.barrier();
    int fd = ::open(shm.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) fail("open " + shm);
    base_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (base_ == MAP_FAILED) fail("mmap " + shm);
    // Each rank reads the FIFO towards it (non-blocking open: no writer yet), then opens the other
    // for writing once both readers exist.
    in_ = ::open(fifo[1 - me_].c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (in_ < 0) fail("open " + fifo[1 - me_]);
    comm.barrier();
    out_ = ::open(fifo[me_].c_str(), O_WRONLY | O_CLOEXEC);
    if (out_ < 0) fail("open " + fifo[me_]);
    fcntl(in_, F_SETFL, fcntl(in_, F_GETFL) & ~O_NONBLOCK);
    comm.barrier();
    if (me_ == 0) {
      ::unlink(shm.c_str());
      for (const auto& f : fifo) ::unlink(f.c_str());
    }
    buf_.assign(max_ > 0 ? max_ : 1, static_cast<char>(0x5a + me_));
  }
  ~RawAnchors() {
    if (base_ && base_ != MAP_FAILED) munmap(base_, bytes_);
    if (in_ >= 0) ::close(in_);
    if (out_ >= 0) ::close(out_);
  }
  RawAnchors(const RawAnchors&) = delete;
  RawAnchors& operator=(const RawAnchors&) = delete;

  size_t max_bytes() const { return max_; }

  // One-way p50 in microseconds on rank 0 (0 on rank 1). Collective over ranks 0 and 1.
  double flag_p50(size_t size, int iters, int warmup) {
    std::vector<double> t;
    for (int it = 0; it < warmup + iters; ++it) {
      const uint64_t k = ++flag_seq_;
      const auto t0 = std::chrono::steady_clock::now();
      if (me_ == 0) {
        put(0, size, k);
        await(1, k);
      } else {
        await(0, k);
        put(1, size, k);
      }
      if (me_ == 0 && it >= warmup) t.push_back(us_since(t0) / 2);
    }
    comm_.barrier();
    return me_ == 0 ? percentile(t, 50) : 0;
  }

  double pipe_p50(size_t size, int iters, int warmup) {
    std::vector<double> t;
    for (int it = 0; it < warmup + iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      const size_t n = size > 0 ? size : 1;  // an empty message still crosses as one byte
      if (me_ == 0) {
        write_all(n);
        read_all(n);
      } else {
        read_all(n);
        write_all(n);
      }
      if (me_ == 0 && it >= warmup) t.push_back(us_since(t0) / 2);
    }
    comm_.barrier();
    return me_ == 0 ? percentile(t, 50) : 0;
  }

 private:
  static constexpr size_t kFlagBytes = 128;  // two sequence words, one cache line each
  [[noreturn]] static void fail(const std::string& what) {
    throw std::runtime_error("anchors: " + what + ": " + std::strerror(errno));
  }
  static double us_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  std::atomic<uint64_t>* flag(int from) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + 64 * from);
  }
  char* area(int from) const { return static_cast<char*>(base_) + kFlagBytes + max_ * size_t(from); }
  void put(int from, size_t size, uint64_t k) {
    std::memcpy(area(from), buf_.data(), size);
    flag(from)->store(k, std::memory_order_release);
  }
  // Spins (the floor has no sleep in it), bounded: a peer that died must not hang the benchmark.
  // After ~10-30 us of pure spinning each check yields: when both ranks share a core (a loaded
  // machine), a pure spin would make every message wait for a time slice (measured: 14 ms p50).
  void await(int from, uint64_t k) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (uint32_t i = 0; flag(from)->load(std::memory_order_acquire) < k; ++i) {
      if (i >= kPureSpins) sched_yield();
      if ((i & 0xfff) == 0 && std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("anchors: the peer's flag did not come within 30 s");
    }
  }
  static constexpr uint32_t kPureSpins = 10000;
  void write_all(size_t size) {
    for (size_t done = 0; done < size;) {
      ssize_t n = ::write(out_, buf_.data() + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("pipe write");
      done += size_t(n);
    }
  }
  void read_all(size_t size) {
    for (size_t done = 0; done < size;) {
      ssize_t n = ::read(in_, buf_.data() + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(n == 0 ? "pipe closed by the peer" : "pipe read");
      done += size_t(n);
    }
  }

  peerlink::Communicator& comm_;
  int me_;
  size_t max_;
  size_t bytes_ = 0;
  void* base_ = nullptr;
  int in_ = -1, out_ = -1;
  uint64_t flag_seq_ = 0;
  std::vector<char> buf_;
};

}  // namespace bench
