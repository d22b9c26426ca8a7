// peerlink::HierCommunicator through the public C++ API (the way a PyTorch backend would use it):
// forked ranks with Options::host_id claiming nodes, the TCP rendezvous as the Meeting, the
// shared-memory stand-in as the engine. Every collective's two-level plan and its whole-on-the-
// engine fallback, grouped send/recv across and within nodes, a split and a shrink; exact payloads.
// (The NCCL library's own tests, tests/nccl/nccl_multinode_*, cover the same through the C API.)
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "peerlink/multinode.h"
#include "support/mp.h"

using namespace peerlink;
using pltest::run_ranks;

namespace {

std::unique_ptr<HierCommunicator> make(const RendezvousAddress& addr, const JobNonce& nonce, int rank, int n,
                                       const std::string& host, const std::string& job, size_t min_bytes) {
  Options o;
  o.timeout = std::chrono::milliseconds(15000);
  o.host_id = host;
  o.hier_min_bytes = min_bytes;
  auto meeting = connect_rendezvous(addr, nonce, rank, n, o);
  HierSetup s;
  s.rank = rank;
  s.nranks = n;
  s.job_id = job;
  s.map = meeting->meet();
  s.opts = o;
  EngineFactory f;
  f.create = [&] { return make_host_engine(job + ".w", rank, n, o); };
  return HierCommunicator::create(s, *meeting, f);
}

float v(int r, size_t i) { return static_cast<float>((r * 5 + i) % 9 + 1); }

void check_ops(HierCommunicator& h, bool expect_two_level) {
  const int n = h.nranks(), me = h.rank();
  const size_t count = 4 * 24;
  std::vector<float> a(count), b(count);
  for (size_t i = 0; i < count; ++i) a[i] = v(me, i);
  const char* path = h.allreduce(a.data(), b.data(), count, DataType::F32, ReduceOp::Sum, nullptr);
  MP_CHECK_MSG((std::strncmp(path, "two-level", 9) == 0) == expect_two_level, path);
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += v(q, i);
    MP_CHECK_MSG(b[i] == want, "allreduce " << i << ": " << b[i] << " != " << want);
  }
  const size_t rc = 6;
  std::vector<float> big(rc * n), small(rc);
  for (size_t i = 0; i < big.size(); ++i) big[i] = v(me, i);
  h.reduce_scatter(big.data(), small.data(), rc, DataType::F32, ReduceOp::Max, nullptr);
  for (size_t i = 0; i < rc; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want = std::max(want, v(q, me * rc + i));
    MP_CHECK_MSG(small[i] == want, "reduce_scatter " << i);
  }
  std::vector<float> gathered(rc * n);
  for (size_t i = 0; i < rc; ++i) small[i] = v(me, i);
  h.all_gather(small.data(), gathered.data(), rc * sizeof(float), nullptr);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < rc; ++i) MP_CHECK_MSG(gathered[q * rc + i] == v(q, i), "all_gather " << q);
  for (int root = 0; root < n; ++root) {
    for (size_t i = 0; i < count; ++i) a[i] = v(me + root, i);
    h.broadcast(a.data(), b.data(), count * sizeof(float), root, nullptr);
    for (size_t i = 0; i < count; ++i) MP_CHECK_MSG(b[i] == v(root + root, i), "broadcast root " << root);
    h.reduce(a.data(), b.data(), count, DataType::F32, ReduceOp::Sum, root, nullptr);
    if (me == root)
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int q = 0; q < n; ++q) want += v(q + root, i);
        MP_CHECK_MSG(b[i] == want, "reduce root " << root);
      }
  }
  // All pairs and a message to itself, one group.
  std::vector<std::vector<int>> out(n, std::vector<int>(5)), in(n, std::vector<int>(5, -1));
  h.group_start();
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < 5; ++i) out[q][i] = me * 100 + q * 10 + i;
    h.send(q, out[q].data(), 5 * sizeof(int), nullptr);
    h.recv(q, in[q].data(), 5 * sizeof(int), nullptr);
  }
  h.group_end();
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 5; ++i) MP_CHECK_MSG(in[q][i] == q * 100 + me * 10 + i, "send/recv from " << q);
  std::vector<int> s(3 * n), t(3 * n);
  for (int i = 0; i < 3 * n; ++i) s[i] = me * 1000 + i;
  h.all_to_all(s.data(), s.data(), 3 * sizeof(int), nullptr);  // in place
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 3; ++i) MP_CHECK_MSG(s[q * 3 + i] == q * 1000 + me * 3 + i, "all_to_all from " << q);
  h.check_async_error();
}

}  // namespace

// 2 nodes x 2 ranks, round-robin: the plans, the threshold, a split by local index (two 2 x 1
// children), a split by node (one-node children: plain Communicators), a shrink to 2 + 1.
// Rank 0 starts the rendezvous (a thread) and shares its address through a shared page: the test
// process itself stays single-threaded before it forks (ThreadSanitizer needs that).
TEST(MpHier, TwoByTwoPlansSplitShrink) {
  struct Shared {
    std::atomic<int> ready;
    RendezvousAddress addr;
  };
  auto* shared = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(shared, MAP_FAILED);
  shared->ready = 0;
  JobNonce nonce{};
  nonce[5] = 9;
  const std::string job = pltest::unique_test_id("hier");
  std::string fails = run_ranks(4, [&](int rank) {
    if (rank == 0) {
      Options o;
      o.socket_ifname = "lo";
      o.timeout = std::chrono::milliseconds(15000);
      shared->addr = start_rendezvous(nonce, o);
      shared->ready = 1;
    }
    for (int i = 0; i < 20000 && !shared->ready.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    MP_CHECK(shared->ready.load());
    const RendezvousAddress addr = shared->addr;
    const std::string host = rank % 2 ? "node-b" : "node-a";
    auto h = make(addr, nonce, rank, 4, host, job, 1);
    MP_CHECK(h->map().nodes() == 2 && !h->map().node_contiguous() && h->rail() != nullptr);
    check_ops(*h, true);
    Options child = h->options();
    HierCommunicator::Child rails = h->split(rank / 2, rank, child);  // ranks {0,1} and {2,3}: 2 x 1
    MP_CHECK(rails.hier && rails.nranks == 2 && rails.hier->rail() == nullptr);
    check_ops(*rails.hier, false);
    HierCommunicator::Child nodes = h->split(rank % 2, rank, child);
    MP_CHECK(nodes.node_only && nodes.nranks == 2);
    std::vector<double> x(8, rank + 1.0), y(8);
    allreduce(*nodes.node_only, x.data(), y.data(), 8, DataType::F64, ReduceOp::Sum);
    MP_CHECK(y[7] == (rank % 2 ? 2.0 + 4.0 : 1.0 + 3.0));
    if (rank != 3) {
      HierCommunicator::Child shrunk = h->shrink({3}, child);
      MP_CHECK(shrunk.hier && shrunk.nranks == 3 && !shrunk.hier->map().uniform());
      check_ops(*shrunk.hier, false);
    }
  });
  munmap(shared, sizeof(Shared));
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(job).empty());
}
