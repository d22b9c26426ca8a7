// The NCCL C API of libnccl.so.2 (src/nccl/) across real processes on the host backend
// (PEERLINK_NCCL_HOST_BACKEND=1: host pointers, device -1). Links the shim as an NCCL program does,
// nothing internal. Covers communicator creation (InitRank, InitAll, Split), routing decisions,
// groups (one and several communicators per thread, the nccl-tests -g 2 pattern), error codes, and
// AllReduce / Send / Recv / Broadcast / AllGather / AlltoAll / Gather / Scatter with verified payloads.
#include <gtest/gtest.h>
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nccl_harness.h"

namespace {

ncclComm_t init(int n, const ncclUniqueId& id, int rank) {
  ncclComm_t c = nullptr;
  CHECK_NCCL(ncclCommInitRank(&c, n, id, rank));
  return c;
}

}  // namespace

// The device API's host functions (nccl_device/core.h needs nvcc): declared as the shim exports them.
extern "C" {
struct ncclDevCommRequirements;
struct ncclDevComm;
ncclResult_t ncclDevCommCreate(ncclComm_t, const ncclDevCommRequirements*, ncclDevComm*);
ncclResult_t ncclDevCommDestroy(ncclComm_t, const ncclDevComm*);
}

TEST(NcclApi, VersionErrorStringsAndArgumentChecks) {
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_NE(std::string(ncclGetErrorString(ncclInvalidUsage)).find("invalid usage"), std::string::npos);
  EXPECT_EQ(ncclGetUniqueId(nullptr), ncclInvalidArgument);
  ncclUniqueId id = new_id();
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRank(&c, 2, id, 2), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("rank 2 of nranks 2"), std::string::npos);
  EXPECT_EQ(ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument);
  ncclConfig_t bad_cfg = NCCL_CONFIG_INITIALIZER;
  bad_cfg.magic = 0;
  EXPECT_EQ(ncclCommInitRankConfig(&c, 1, id, 0, &bad_cfg), ncclInvalidArgument);
  int n = 0;
  EXPECT_EQ(ncclCommCount(nullptr, &n), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 1, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);  // no group open
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclInvalidArgument);
  void* p = nullptr;
  ASSERT_EQ(ncclMemAlloc(&p, 1000), ncclSuccess);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, 1000);
  EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  EXPECT_EQ(ncclMemAlloc(nullptr, 8), ncclInvalidArgument);
}

// Single-rank communicator in this process: queries, registration, async error, bad op arguments.
TEST(NcclApi, OneRankQueriesRegistrationAndErrors) {
  ncclUniqueId id = new_id();
  ncclComm_t c = nullptr;
  ASSERT_EQ(ncclCommInitRank(&c, 1, id, 0), ncclSuccess) << ncclGetLastError(nullptr);
  int n = -1, r = -1, d = 7;
  EXPECT_EQ(ncclCommCount(c, &n), ncclSuccess);
  EXPECT_EQ(ncclCommUserRank(c, &r), ncclSuccess);
  EXPECT_EQ(ncclCommCuDevice(c, &d), ncclSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(d, -1);  // host backend
  EXPECT_EQ(ncclCommCount(c, nullptr), ncclInvalidArgument);
  std::vector<float> a(64, 2.0f), b(64, 0.0f);
  void* h = nullptr;
  ASSERT_EQ(ncclCommRegister(c, a.data(), a.size() * 4, &h), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(c, h), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(c, h), ncclInvalidArgument);  // twice
  ncclWindow_t w = nullptr;
  ASSERT_EQ(ncclCommWindowRegister(c, b.data(), b.size() * 4, &w, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  EXPECT_EQ(ncclCommWindowDeregister(c, w), ncclSuccess);
  // NCCL's device API (torch imports it) is exported and refused on a peerlink communicator.
  EXPECT_EQ(ncclDevCommCreate(c, nullptr, nullptr), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(c)).find("ncclDevCommCreate: NCCL's device API is not available"),
            std::string::npos);
  EXPECT_EQ(ncclDevCommDestroy(c, nullptr), ncclInvalidUsage);
  EXPECT_EQ(ncclDevCommDestroy(nullptr, nullptr), ncclInvalidArgument);
  // Bad arguments are rejected before anything is queued.
  EXPECT_EQ(ncclAllReduce(a.data(), b.data(), 64, static_cast<ncclDataType_t>(99), ncclSum, c, nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(a.data(), b.data(), 64, ncclFloat, static_cast<ncclRedOp_t>(77), c, nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(nullptr, b.data(), 64, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(a.data(), 64, ncclFloat, 1, c, nullptr), ncclInvalidArgument);  // peer out of range
  EXPECT_EQ(ncclBroadcast(a.data(), b.data(), 64, ncclFloat, -1, c, nullptr), ncclInvalidArgument);
  // One rank: the allreduce is a copy; send/recv to itself inside a group is a copy.
  ASSERT_EQ(ncclAllReduce(a.data(), b.data(), 64, ncclFloat, ncclSum, c, nullptr), ncclSuccess)
      << ncclGetLastError(nullptr);
  EXPECT_EQ(b[63], 2.0f);
  std::vector<int> s(10, 5), t(10, 0);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(s.data(), 10, ncclInt, 0, c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(t.data(), 10, ncclInt, 0, c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(t[9], 5);
  // One rank: a reduction with any op but PreMulSum is a copy in every dtype, those peerlink does
  // not reduce (int8, uint8, fp8) included, so no real NCCL is needed (NCCL 2.28.9 refuses fp8 avg on
  // one rank); nothing in place; nothing past the count.
  std::vector<int8_t> i8(16), o8(17, 0);
  for (int i = 0; i < 16; ++i) i8[i] = static_cast<int8_t>(3 * i - 20);
  ASSERT_EQ(ncclAllReduce(i8.data(), o8.data(), 16, ncclInt8, ncclAvg, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(std::memcmp(o8.data(), i8.data(), 16), 0);
  EXPECT_EQ(o8[16], 0);
  std::vector<uint8_t> f8(8), r8(8, 0);
  for (int i = 0; i < 8; ++i) f8[i] = static_cast<uint8_t>(0x31 + 5 * i);
  ASSERT_EQ(ncclReduce(f8.data(), r8.data(), 8, ncclFloat8e4m3, ncclMax, 0, c, nullptr), ncclSuccess);
  EXPECT_EQ(r8, f8);
  std::fill(r8.begin(), r8.end(), 0);
  ASSERT_EQ(ncclReduceScatter(f8.data(), r8.data(), 8, ncclUint8, ncclProd, c, nullptr), ncclSuccess);
  EXPECT_EQ(r8, f8);
  ASSERT_EQ(ncclAllReduce(f8.data(), f8.data(), 8, ncclFloat8e5m2, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_EQ(f8[7], 0x31 + 35);
  // A collective of count 0 enqueues nothing, as NCCL drops it: not even the forward above (which
  // fails here), in a group or not, null buffers allowed; its argument checks still run.
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclInt8, ncclSum, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclReduce(nullptr, nullptr, 0, ncclInt8, ncclAvg, 0, c, nullptr), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclReduceScatter(nullptr, nullptr, 0, ncclUint8, ncclSum, c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllGather(nullptr, nullptr, 0, ncclInt8, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAlltoAll(nullptr, nullptr, 0, ncclFloat, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclBroadcast(nullptr, nullptr, 0, ncclInt8, 0, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclAvg, c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(c);
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, static_cast<ncclDataType_t>(99), ncclSum, c, nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(nullptr, nullptr, 0, ncclInt8, 3, c, nullptr), ncclInvalidArgument);  // root out of range
  std::fill(b.begin(), b.end(), 0.0f);
  ASSERT_EQ(ncclAllReduce(a.data(), b.data(), 64, ncclFloat, ncclAvg, c, nullptr), ncclSuccess);
  EXPECT_EQ(b[0], 2.0f);
  // What peerlink does not implement goes to the real NCCL, which the host backend cannot use:
  // an error, never a wrong result. On one rank that is a PreMulSum (x * scalar, not a copy).
  float scale = 0.5f;
  ncclRedOp_t pre;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&pre, &scale, ncclFloat, ncclScalarHostImmediate, c), ncclSuccess);
  EXPECT_GE(static_cast<int>(pre), static_cast<int>(ncclNumOps));
  EXPECT_EQ(ncclAllReduce(a.data(), b.data(), 64, ncclFloat, pre, c, nullptr), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(c)).find("real NCCL"), std::string::npos);
  EXPECT_EQ(b[0], 2.0f);  // untouched
  EXPECT_EQ(ncclRedOpDestroy(pre, c), ncclSuccess);
  EXPECT_EQ(ncclRedOpDestroy(pre, c), ncclInvalidArgument);
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(c, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(ncclCommFinalize(c), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// Routing: an id a real NCCL made (no peerlink magic) and one made on another host both go to the
// real NCCL, which is an error on the host backend (nothing is silently run on peerlink).
TEST(NcclApi, RoutingForeignIdsGoToRealNccl) {
  ncclUniqueId foreign;
  std::memset(&foreign, 0, sizeof foreign);
  foreign.internal[0] = 2;  // looks like a real NCCL bootstrap handle
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRank(&c, 2, foreign, 0), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("real NCCL"), std::string::npos);
  // An id of an older library (no rendezvous address, flag bit 1 of byte 96 clear: unique_id.h) made
  // on another host: its host field routes it.
  ncclUniqueId other_host = new_id();
  other_host.internal[96] &= ~2;
  for (int i = 72; i < 80; ++i) other_host.internal[i] ^= 0x5a;  // host identity field (unique_id.h)
  EXPECT_EQ(ncclCommInitRank(&c, 2, other_host, 1), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("another host"), std::string::npos);
}

// A communicator of the real NCCL reaching this library's exports (the real library calling its own
// API, bound here): recognised and forwarded; with no real NCCL loaded (the host backend) every
// query is ncclInvalidArgument naming it, and nothing of the object is read beyond its first word.
TEST(NcclApi, ForeignCommunicatorsAreNotTakenForOurs) {
  // In a fresh process of this binary: an earlier test of this process may have opened a real NCCL
  // installed on the machine, which would then be handed the fake communicator.
  if (!std::getenv("PL_TEST_FOREIGN_CHILD")) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      setenv("PL_TEST_FOREIGN_CHILD", "1", 1);
      execl("/proc/self/exe", "nccl_api_tests", "--gtest_filter=NcclApi.ForeignCommunicatorsAreNotTakenForOurs",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
    return;
  }
  alignas(64) unsigned char not_ours[4096];
  std::memset(not_ours, 0xab, sizeof not_ours);
  auto* c = reinterpret_cast<ncclComm_t>(not_ours);
  int v = -7;
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(ncclCommUserRank(c, &v), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("ncclCommUserRank: not a communicator of this library"),
            std::string::npos)
      << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclCommCount(c, &v), ncclInvalidArgument);
  EXPECT_EQ(ncclCommCuDevice(c, &v), ncclInvalidArgument);
  EXPECT_EQ(ncclCommGetAsyncError(c, &async), ncclInvalidArgument);
  EXPECT_EQ(ncclCommFinalize(c), ncclInvalidArgument);
  EXPECT_EQ(ncclCommRevoke(c, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommAbort(c), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(c), ncclInvalidArgument);
  EXPECT_EQ(v, -7);
  for (unsigned char b : not_ours) ASSERT_EQ(b, 0xab);
}

// Three processes: allreduce (several dtypes and ops, in and out of place), a send/recv ring in a
// group, broadcast, all-gather, all-to-all, gather, scatter, split; payloads verified.
TEST(NcclApi, ThreeProcessesCollectivesAndP2p) {
  const int n = 3;
  ncclUniqueId id = new_id();
  std::string err = run_ranks(n, [&](int rank) {
    setenv("PEERLINK_NCCL_P2P_PLAN_MIN", "4096", 1);  // the large all-gather / all-to-all below go as send/recv
    ncclComm_t c = init(n, id, rank);
    const size_t count = 1000;
    std::vector<float> f(count), fo(count, -1.0f);
    for (size_t i = 0; i < count; ++i) f[i] = static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i);
    CHECK_NCCL(ncclAllReduce(f.data(), fo.data(), count, ncclFloat32, ncclSum, c, nullptr));
    for (size_t i = 0; i < count; ++i) CHECK(fo[i] == 3.0f + 3.0f * static_cast<float>(i));  // 0.5+1+1.5
    std::vector<int32_t> m(count);
    for (size_t i = 0; i < count; ++i) m[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(rank) * 13) % 101);
    CHECK_NCCL(ncclAllReduce(m.data(), m.data(), count, ncclInt32, ncclMax, c, nullptr));  // in place
    for (size_t i = 0; i < count; ++i) {
      int32_t want = 0;
      for (int q = 0; q < n; ++q) want = std::max(want, static_cast<int32_t>((i * 7 + static_cast<size_t>(q) * 13) % 101));
      CHECK(m[i] == want);
    }
    std::vector<uint32_t> u(count, 0xFFFFFFF0u + static_cast<uint32_t>(rank)), uo(count);
    CHECK_NCCL(ncclAllReduce(u.data(), uo.data(), count, ncclUint32, ncclSum, c, nullptr));
    CHECK(uo[5] == 0xFFFFFFF0u * 3u + 3u);  // wraps like NCCL
    // Ring in one group: send to the next rank, receive from the previous.
    std::vector<int64_t> s(257), r(257, -1);
    for (size_t i = 0; i < s.size(); ++i) s[i] = rank * 100000 + static_cast<int64_t>(i);
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclSend(s.data(), s.size(), ncclInt64, (rank + 1) % n, c, nullptr));
    CHECK_NCCL(ncclRecv(r.data(), r.size(), ncclInt64, (rank + n - 1) % n, c, nullptr));
    CHECK_NCCL(ncclGroupEnd());
    for (size_t i = 0; i < r.size(); ++i) CHECK(r[i] == ((rank + n - 1) % n) * 100000 + static_cast<int64_t>(i));
    // In place (sendrecv_perf's in-place run): send from and receive into the same buffer.
    std::vector<int32_t> ip(100000);
    for (size_t i = 0; i < ip.size(); ++i) ip[i] = rank * 1000000 + static_cast<int32_t>(i);
    for (int iter = 0; iter < 2; ++iter) {
      CHECK_NCCL(ncclGroupStart());
      CHECK_NCCL(ncclSend(ip.data(), ip.size(), ncclInt32, (rank + 1) % n, c, nullptr));
      CHECK_NCCL(ncclRecv(ip.data(), ip.size(), ncclInt32, (rank + n - 1) % n, c, nullptr));
      CHECK_NCCL(ncclGroupEnd());
    }
    for (size_t i = 0; i < ip.size(); i += 997)
      CHECK(ip[i] == ((rank + 2 * (n - 1)) % n) * 1000000 + static_cast<int32_t>(i));
    // Broadcast from rank 1 (int8: no arithmetic, any dtype), in place with ncclBcast too.
    std::vector<int8_t> b(333, static_cast<int8_t>(rank == 1 ? 42 : 0));
    CHECK_NCCL(ncclBcast(b.data(), b.size(), ncclInt8, 1, c, nullptr));
    for (int8_t x : b) CHECK(x == 42);
    // All-gather, all-to-all, gather to 2, scatter from 0.
    std::vector<int32_t> mine(50), all(50 * n, -1);
    for (int i = 0; i < 50; ++i) mine[i] = rank * 1000 + i;
    CHECK_NCCL(ncclAllGather(mine.data(), all.data(), 50, ncclInt32, c, nullptr));
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 50; ++i) CHECK(all[q * 50 + i] == q * 1000 + i);
    std::vector<int32_t> mine_big(1500), all_big(1500 * n, -1);  // 6000 B per peer: grouped send/recv
    for (int i = 0; i < 1500; ++i) mine_big[i] = rank * 100000 + i;
    CHECK_NCCL(ncclAllGather(mine_big.data(), all_big.data(), 1500, ncclInt32, c, nullptr));
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 1500; ++i) CHECK(all_big[q * 1500 + i] == q * 100000 + i);
    std::vector<int32_t> a2a_in(20 * n), a2a_out(20 * n, -1);
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 20; ++i) a2a_in[q * 20 + i] = rank * 10000 + q * 100 + i;
    CHECK_NCCL(ncclAlltoAll(a2a_in.data(), a2a_out.data(), 20, ncclInt32, c, nullptr));
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 20; ++i) CHECK(a2a_out[q * 20 + i] == q * 10000 + rank * 100 + i);
    std::vector<int32_t> big_in(2001 * n), big_out(2001 * n, -1);  // 8004 B per peer: grouped send/recv
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 2001; ++i) big_in[q * 2001 + i] = rank * 10000000 + q * 10000 + i;
    CHECK_NCCL(ncclAlltoAll(big_in.data(), big_out.data(), 2001, ncclInt32, c, nullptr));
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 2001; ++i) CHECK(big_out[q * 2001 + i] == q * 10000000 + rank * 10000 + i);
    // In place (alltoall_perf's in-place run), small and large blocks, alone and in a group with a
    // send/recv ring: every block is the peer's, none overwritten before it was sent.
    for (int cnt : {20, 2001}) {
      std::vector<int32_t> ipa(cnt * n), ring_out(64, -1), ring_in(64, rank);
      for (int q = 0; q < n; ++q)
        for (int i = 0; i < cnt; ++i) ipa[q * cnt + i] = rank * 10000000 + q * 10000 + i;
      CHECK_NCCL(ncclGroupStart());
      CHECK_NCCL(ncclAlltoAll(ipa.data(), ipa.data(), cnt, ncclInt32, c, nullptr));
      CHECK_NCCL(ncclSend(ring_in.data(), 64, ncclInt32, (rank + 1) % n, c, nullptr));
      CHECK_NCCL(ncclRecv(ring_out.data(), 64, ncclInt32, (rank + n - 1) % n, c, nullptr));
      CHECK_NCCL(ncclGroupEnd());
      for (int q = 0; q < n; ++q)
        for (int i = 0; i < cnt; ++i) CHECK(ipa[q * cnt + i] == q * 10000000 + rank * 10000 + i);
      CHECK(ring_out[63] == (rank + n - 1) % n);
      CHECK_NCCL(ncclAlltoAll(ipa.data(), ipa.data(), cnt, ncclInt32, c, nullptr));  // back again, alone
      for (int q = 0; q < n; ++q)
        for (int i = 0; i < cnt; ++i) CHECK(ipa[q * cnt + i] == rank * 10000000 + q * 10000 + i);
    }
    std::vector<int32_t> g(50 * n, -1);
    CHECK_NCCL(ncclGather(mine.data(), rank == 2 ? g.data() : nullptr, 50, ncclInt32, 2, c, nullptr));
    if (rank == 2)
      for (int q = 0; q < n; ++q) CHECK(g[q * 50 + 7] == q * 1000 + 7);
    std::vector<int32_t> sc(30, -1);
    std::vector<int32_t> src(30 * n);
    for (int i = 0; i < 30 * n; ++i) src[i] = 5000 + i;
    CHECK_NCCL(ncclScatter(rank == 0 ? src.data() : nullptr, sc.data(), 30, ncclInt32, 0, c, nullptr));
    for (int i = 0; i < 30; ++i) CHECK(sc[i] == 5000 + rank * 30 + i);
    // Reduce-scatter, reduce to 1, broadcast of floats from 0 (peerlink's collectives).
    std::vector<float> rs_in(10 * n), rs_out(10, -1.0f);
    for (int i = 0; i < 10 * n; ++i) rs_in[i] = static_cast<float>(rank + i);
    CHECK_NCCL(ncclReduceScatter(rs_in.data(), rs_out.data(), 10, ncclFloat32, ncclSum, c, nullptr));
    for (int i = 0; i < 10; ++i) CHECK(rs_out[i] == 3.0f + 3.0f * static_cast<float>(rank * 10 + i));
    std::vector<float> red(count, -1.0f);
    CHECK_NCCL(ncclReduce(f.data(), rank == 1 ? red.data() : nullptr, count, ncclFloat32, ncclMax, 1, c, nullptr));
    if (rank == 1)
      for (size_t i = 0; i < count; i += 37) CHECK(red[i] == 1.5f + static_cast<float>(i));
    std::vector<float> bc(77, rank == 0 ? 9.25f : 0.0f), bco(77, -1.0f);
    CHECK_NCCL(ncclBroadcast(bc.data(), bco.data(), 77, ncclFloat32, 0, c, nullptr));
    for (float x : bco) CHECK(x == 9.25f);
    // Split: even ranks {0, 2} and odd {1}; key reverses the order.
    ncclComm_t sub = nullptr;
    CHECK_NCCL(ncclCommSplit(c, rank % 2, -rank, &sub, nullptr));
    CHECK(sub != nullptr);
    int sn = 0, sr = -1;
    CHECK_NCCL(ncclCommCount(sub, &sn));
    CHECK_NCCL(ncclCommUserRank(sub, &sr));
    CHECK(sn == (rank % 2 == 0 ? 2 : 1));
    if (rank == 0) CHECK(sr == 1);
    if (rank == 2) CHECK(sr == 0);
    std::vector<double> d(16, rank + 1.0), dout(16);
    CHECK_NCCL(ncclAllReduce(d.data(), dout.data(), 16, ncclFloat64, ncclSum, sub, nullptr));
    CHECK(dout[0] == (rank % 2 == 0 ? 4.0 : 2.0));
    ncclComm_t none = reinterpret_cast<ncclComm_t>(1);
    CHECK_NCCL(ncclCommSplit(c, rank == 0 ? NCCL_SPLIT_NOCOLOR : 7, 0, &none, nullptr));
    CHECK((rank == 0) == (none == nullptr));
    if (none) {
      std::vector<float> x(4, 1.0f);
      CHECK_NCCL(ncclAllReduce(x.data(), x.data(), 4, ncclFloat, ncclSum, none, nullptr));
      CHECK(x[3] == 2.0f);
      CHECK_NCCL(ncclCommDestroy(none));
    }
    CHECK_NCCL(ncclCommDestroy(sub));
    CHECK_NCCL(ncclCommDestroy(c));
  });
  EXPECT_EQ(err, "");
}

// The nccl-tests -g 2 pattern: one process, two communicators, one thread; creation inside a
// group, then collectives and send/recv of both communicators inside one group.
TEST(NcclApi, TwoCommunicatorsOneThreadGroups) {
  std::string err = run_ranks(1, [&](int) {
    ncclUniqueId id = new_id();
    ncclComm_t c[2] = {nullptr, nullptr};
    CHECK_NCCL(ncclGroupStart());
    for (int i = 0; i < 2; ++i) CHECK_NCCL(ncclCommInitRank(&c[i], 2, id, i));
    CHECK_NCCL(ncclGroupEnd());
    std::vector<float> in[2], out[2];
    for (int i = 0; i < 2; ++i) {
      in[i].assign(4096, static_cast<float>(i + 1));
      out[i].assign(4096, 0.0f);
    }
    for (int iter = 0; iter < 3; ++iter) {
      CHECK_NCCL(ncclGroupStart());
      for (int i = 0; i < 2; ++i) CHECK_NCCL(ncclAllReduce(in[i].data(), out[i].data(), 4096, ncclFloat, ncclSum, c[i], nullptr));
      CHECK_NCCL(ncclGroupEnd());
      for (int i = 0; i < 2; ++i) CHECK(out[i][4095] == 3.0f);
      // sendrecv_perf's pattern: each sends to the next and receives from the previous.
      std::vector<int> s[2], r[2];
      for (int i = 0; i < 2; ++i) {
        s[i].assign(1000 + iter, i * 7 + iter);
        r[i].assign(1000 + iter, -1);
      }
      CHECK_NCCL(ncclGroupStart());
      for (int i = 0; i < 2; ++i) {
        CHECK_NCCL(ncclSend(s[i].data(), s[i].size(), ncclInt, 1 - i, c[i], nullptr));
        CHECK_NCCL(ncclRecv(r[i].data(), r[i].size(), ncclInt, 1 - i, c[i], nullptr));
      }
      CHECK_NCCL(ncclGroupEnd());
      for (int i = 0; i < 2; ++i) CHECK(r[i][999] == (1 - i) * 7 + iter);
    }
    for (int i = 0; i < 2; ++i) CHECK_NCCL(ncclCommDestroy(c[i]));
    // ncclCommInitAll: the same, made by the library.
    ncclComm_t all[2];
    CHECK_NCCL(ncclCommInitAll(all, 2, nullptr));
    std::vector<int64_t> x0(8, 5), x1(8, 6);
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclAllReduce(x0.data(), x0.data(), 8, ncclInt64, ncclProd, all[0], nullptr));
    CHECK_NCCL(ncclAllReduce(x1.data(), x1.data(), 8, ncclInt64, ncclProd, all[1], nullptr));
    CHECK_NCCL(ncclGroupEnd());
    CHECK(x0[7] == 30 && x1[0] == 30);
    for (auto* cc : all) CHECK_NCCL(ncclCommDestroy(cc));
  });
  EXPECT_EQ(err, "");
}

// Several communicators per process, driven from several threads (one thread per communicator,
// as NCCL allows), two processes; then abort instead of destroy.
TEST(NcclApi, SeveralCommunicatorsFromThreads) {
  ncclUniqueId ids[2] = {new_id(), new_id()};
  std::string err = run_ranks(2, [&](int rank) {
    std::vector<std::string> errors(2);
    std::vector<std::thread> ts;
    for (int k = 0; k < 2; ++k)
      ts.emplace_back([&, k] {
        try {
          ncclComm_t c = init(2, ids[k], rank);
          for (int iter = 0; iter < 20; ++iter) {
            std::vector<int> v(100 + iter, rank + k * 10 + iter);
            CHECK_NCCL(ncclAllReduce(v.data(), v.data(), v.size(), ncclInt, ncclSum, c, nullptr));
            CHECK(v.back() == 1 + 2 * (k * 10 + iter));
          }
          CHECK_NCCL(k == 0 ? ncclCommDestroy(c) : ncclCommAbort(c));
        } catch (const std::exception& e) {
          errors[k] = e.what();
        }
      });
    for (auto& t : ts) t.join();
    for (auto& e : errors) CHECK(e.empty() || (throw std::runtime_error(e), false));
  });
  EXPECT_EQ(err, "");
}
