// Regression: two communicators of one process (one thread per rank, as NCCL programs drive them)
// on host memory exported by descriptor (Options::host_fd). Each backend's descriptor server bound
// one abstract socket named after the job and the process only, so the second communicator of the
// process could not bind it ("Address already in use") and its first export failed, and every
// export id (each backend counts from 1) was ambiguous on that socket. Servers are per backend now
// and the handle names its own. Checked both in process (allreduce, send_direct between the two)
// and from a third process that fetches the descriptors of both communicators of the other one.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;

namespace {

Options fd_opts(DescriptorPassing m) {
  Options o;
  o.timeout = std::chrono::milliseconds(15000);
  o.host_fd = true;
  o.host_chunk_bytes = 65536;  // several chunks per allocation (allreduce scratch: 136)
  o.fd_passing = m;
  return o;
}

class MpFdTwoComms : public testing::TestWithParam<DescriptorPassing> {};

// Runs ranks `first` and `first + 1` of a `world`-rank job in this process, one thread each.
void two_threads(int first, const std::function<void(int)>& body, std::string err[2]) {
  auto run = [&](int k) {
    try {
      body(first + k);
    } catch (const std::exception& e) {
      err[k] = e.what();
    }
  };
  std::thread t(run, 1);
  run(0);
  t.join();
}

TEST_P(MpFdTwoComms, AllreduceAndSendDirectBetweenTwoCommunicatorsOfOneProcess) {
  const std::string uid = pltest::unique_test_id("fd2c");
  const size_t n = (size_t(3) << 20) / sizeof(float) + 7;  // two-shot, several steps of host scratch
  std::vector<float> out[2];
  std::string err[2];
  CommStats stats[2];
  two_threads(0, [&](int r) {
    Communicator c(uid, r, 2, kHostDevice, fd_opts(GetParam()));
    std::vector<float> in(n);
    for (size_t i = 0; i < n; ++i) in[i] = float((i * 7 + r * 3) % 1000);
    out[r].assign(n, -1.0f);
    allreduce(c, in.data(), out[r].data(), n, DataType::F32, ReduceOp::Sum);
    // send_direct between the two communicators, both ways, into alloc() memory of several chunks.
    const size_t len = 5 * 65536 + 123;
    char* buf = static_cast<char*>(c.alloc(len + 64));
    std::memset(buf, 0, len + 64);
    c.notify_ipc_buffer(1 - r, 1, buf + 64, len, 1);
    Request rq = c.irecv(1 - r, 1, 0, len);
    std::vector<char> src(len);
    pltest::fill_pattern(src.data(), len, 10 + r);
    c.send_direct(1 - r, src.data(), len, 1, 1);
    rq.wait();
    size_t bad = pltest::check_pattern(buf + 64, len, 10 + (1 - r));
    if (bad != SIZE_MAX) throw Error("rank " + std::to_string(r) + ": byte " + std::to_string(bad) + " wrong");
    c.barrier();
    stats[r] = c.stats();
    c.free(buf);
  }, err);
  EXPECT_EQ(err[0], "");
  EXPECT_EQ(err[1], "");
  for (int r = 0; r < 2; ++r) {
    size_t wrong = 0;
    for (size_t i = 0; i < n && out[r].size() == n; ++i)
      wrong += out[r][i] != float((i * 7) % 1000 + (i * 7 + 3) % 1000);
    EXPECT_EQ(out[r].size(), n);
    EXPECT_EQ(wrong, 0u) << "rank " << r;
    EXPECT_GE(stats[r].exports_fd, 1u) << "rank " << r << " did not export by descriptor";
  }
}

// Ranks 0 and 1 in one process, rank 2 in another: rank 2 fetches the descriptors of both
// communicators of the first process (their export ids are equal: each backend counts from 1), and
// they fetch rank 2's. Every transfer is checked byte for byte.
TEST_P(MpFdTwoComms, ThirdProcessImportsFromBothCommunicatorsOfAProcess) {
  const std::string uid = pltest::unique_test_id("fd3p");
  const size_t len = 3 * 65536 + 77;
  auto body = [&](int r) {
    Communicator c(uid, r, 3, kHostDevice, fd_opts(GetParam()));
    std::vector<char*> bufs(3, nullptr);
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      bufs[p] = static_cast<char*>(c.alloc(len));
      std::memset(bufs[p], 0, len);
      c.notify_ipc_buffer(p, 1, bufs[p], len, 1);
    }
    std::vector<Request> reqs;
    for (int p = 0; p < 3; ++p)
      if (p != r) reqs.push_back(c.irecv(p, 1, 0, len));
    std::vector<char> src(len);
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      pltest::fill_pattern(src.data(), len, 100 + r * 10 + p);
      c.send_direct(p, src.data(), len, 1, 1);
    }
    for (auto& q : reqs) q.wait();
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      size_t bad = pltest::check_pattern(bufs[p], len, 100 + p * 10 + r);
      MP_CHECK_MSG(bad == SIZE_MAX, "rank " << r << ": buffer from rank " << p << " wrong at byte " << bad);
    }
    c.barrier();
    CommStats st = c.stats();
    MP_CHECK_MSG(st.exports_fd == 2, "rank " << r << " exports by descriptor: " << st.exports_fd);
    if (r == 2) MP_CHECK_MSG(st.opens_fd == 2, "rank 2 opens by descriptor: " << st.opens_fd);
    for (char* b : bufs)
      if (b) c.free(b);
  };
  std::string fails = run_ranks(2, [&](int proc) {
    if (proc == 1) return body(2);
    std::string err[2];
    two_threads(0, body, err);
    MP_CHECK_MSG(err[0].empty() && err[1].empty(), "rank 0: " << err[0] << " | rank 1: " << err[1]);
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, MpFdTwoComms,
                         testing::Values(DescriptorPassing::Auto, DescriptorPassing::Socket));

}  // namespace
