// Failures across simulated nodes (host backend, the NCCL C API): a rank SIGKILLed on one node,
// ranks that disagree on nranks, a rank that never comes, ranks that claim one node from two
// machines or without a shared /dev/shm, a real NCCL that cannot be loaded, a rendezvous whose
// maker is gone. Every rank gets a clear error within the timeout; nothing hangs (run_ranks kills
// and reports a rank that outlives its limit); no shared memory is left behind.
#include <dirent.h>
#include <sys/mount.h>

#include "multinode_harness.h"

namespace {

using mn::Claim;
using mn::Layout;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> shm_entries(const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).compare(0, prefix.size(), prefix) == 0) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

// Init that must fail: the result and ncclGetLastError contain `parts`, within `limit_s`.
void expect_init_fails(int nranks, const ncclUniqueId& id, int rank, std::initializer_list<const char*> parts,
                       double limit_s) {
  auto t0 = std::chrono::steady_clock::now();
  ncclComm_t c = nullptr;
  ncclResult_t r = ncclCommInitRank(&c, nranks, id, rank);
  double dt = seconds_since(t0);
  std::string msg = ncclGetLastError(nullptr);
  CHECK(r != ncclSuccess);
  for (const char* p : parts)
    if (msg.find(p) == std::string::npos)
      throw std::runtime_error("rank " + std::to_string(rank) + ": error '" + msg + "' lacks '" + p + "'");
  if (dt > limit_s)
    throw std::runtime_error("rank " + std::to_string(rank) + ": failed after " + std::to_string(dt) + " s");
  if (c) ncclCommDestroy(c);  // a failed init leaves a handle NCCL lets one destroy
}

}  // namespace

// A rank of node 0 is SIGKILLed before an allreduce: every other rank's allreduce (two-level)
// fails within the timeout (PeerLostError for its node peer and rail partner, TimeoutError for the
// rank whose rail partner is alive but out), abort works, and no segment of the job is left.
TEST(NcclMultinodeFail, RankKilledOnOneNode) {
  if (!mn::uts_available()) GTEST_SKIP() << "no UTS namespaces (needs root)";
  ncclUniqueId id;
  std::string err = mn::run_claimed({"2x2 kill", {0, 0, 1, 1}, 0, Claim::Uts},
                                    {{"PEERLINK_TIMEOUT_MS", "4000"}, {"PEERLINK_HIER_MIN_BYTES", "1"}},
                                    [&](int rank, const ncclUniqueId& uid) {
    ncclComm_t c = nullptr;
    CHECK_NCCL(ncclCommInitRank(&c, 4, uid, rank));
    std::vector<float> a(256, 1.0f), b(256, 0.0f);
    CHECK_NCCL(ncclAllReduce(a.data(), b.data(), 256, ncclFloat, ncclSum, c, nullptr));
    CHECK(b[255] == 4.0f);
    if (rank == 1) raise(SIGKILL);
    auto t0 = std::chrono::steady_clock::now();
    ncclResult_t r = ncclAllReduce(a.data(), b.data(), 256, ncclFloat, ncclSum, c, nullptr);
    double dt = seconds_since(t0);
    CHECK(r != ncclSuccess);
    if (dt > 4.0 + 8.0) throw std::runtime_error("the error came after " + std::to_string(dt) + " s");
    ncclResult_t async = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(c, &async));
    CHECK_NCCL(ncclCommAbort(c));
  }, 90, "", nullptr, &id);
  EXPECT_EQ(err, "");
  std::vector<std::string> left = shm_entries(mn::shm_prefix_of(id));
  EXPECT_TRUE(left.empty()) << left.size() << " segment(s) left, first " << (left.empty() ? "" : left[0]);
}

// Ranks that disagree on nranks: both learn it at once, with both values named.
TEST(NcclMultinodeFail, RanksDisagreeOnNranks) {
  std::string err = mn::run_claimed({"nranks", {0, 1}, 0, Claim::HostId}, {{"PEERLINK_TIMEOUT_MS", "20000"}},
                                    [&](int rank, const ncclUniqueId& id) {
    expect_init_fails(rank == 0 ? 2 : 3, id, rank, {"nranks 3", "2"}, 10.0);
  });
  EXPECT_EQ(err, "");
}

// Ranks across nodes choose their plans alone, so their thresholds must agree: refused at once.
TEST(NcclMultinodeFail, PlanThresholdsDisagree) {
  std::string err = mn::run_claimed({"plans", {0, 1}, 0, Claim::HostId}, {{"PEERLINK_TIMEOUT_MS", "20000"}},
                                    [&](int rank, const ncclUniqueId& id) {
    setenv("PEERLINK_HIER_MIN_BYTES", rank == 0 ? "1" : "4096", 1);
    expect_init_fails(2, id, rank, {"PEERLINK_HIER_MIN_BYTES=4096", "the same value"}, 10.0);
  });
  EXPECT_EQ(err, "");
}

// A rank that never calls: the others fail at the timeout, naming it.
TEST(NcclMultinodeFail, MissingRankNamed) {
  std::string err = mn::run_claimed({"missing", {0, 1}, 0, Claim::HostId}, {{"PEERLINK_TIMEOUT_MS", "1500"}},
                                    [&](int rank, const ncclUniqueId& id) {
    expect_init_fails(3, id, rank, {"ranks 2 of 3 did not reach the multi-node rendezvous"}, 10.0);
  });
  EXPECT_EQ(err, "");
}

// Rank 3 claims node 1 (the same PEERLINK_HOSTID as rank 2) from another machine (a boot id of its
// own, bind-mounted in a mount namespace): ranks of one node must share a machine, so every rank
// fails at once, naming both. (Without a configured host id, hostname + boot id would make rank 3 a
// node of its own, as NCCL does.)
TEST(NcclMultinodeFail, OneNodeClaimedByTwoMachines) {
  if (!mn::uts_available()) GTEST_SKIP() << "no namespaces (needs root)";
  const std::string fake = "/tmp/pl-mn-boot-" + std::to_string(getpid());
  { std::ofstream(fake) << "00000000-1111-2222-3333-444444444444\n"; }
  std::string err = mn::run_claimed(
      {"two machines", {0, 0, 1, 1}, 0, Claim::HostId}, {{"PEERLINK_TIMEOUT_MS", "20000"}},
      [&](int rank, const ncclUniqueId& id) {
        expect_init_fails(4, id, rank, {"rank 2", "rank 3", "different machines"}, 10.0);
      },
      60, "", [&](int rank) {
        if (rank != 3) return;
        if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            mount(fake.c_str(), "/proc/sys/kernel/random/boot_id", nullptr, MS_BIND, nullptr) != 0)
          throw std::runtime_error("cannot give rank 3 a boot id of its own (mount namespace)");
      });
  unlink(fake.c_str());
  EXPECT_EQ(err, "");
}

// Rank 3 has node 1's hostname but another boot id: as in NCCL that is another host (a third
// node). The host backend's stand-in engine needs every rank on one machine: every rank is told so.
TEST(NcclMultinodeFail, SameHostnameOtherMachineOnHostBackend) {
  if (!mn::uts_available()) GTEST_SKIP() << "no namespaces (needs root)";
  const std::string fake = "/tmp/pl-mn-boot2-" + std::to_string(getpid());
  { std::ofstream(fake) << "00000000-5555-2222-3333-444444444444\n"; }
  std::string err = mn::run_claimed(
      {"other machine", {0, 0, 1, 1}, 0, Claim::Uts}, {{"PEERLINK_TIMEOUT_MS", "20000"}},
      [&](int rank, const ncclUniqueId& id) {
        expect_init_fails(4, id, rank, {"needs every rank on one machine", "node 2"}, 10.0);
      },
      60, "", [&](int rank) {
        if (rank != 3) return;
        if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            mount(fake.c_str(), "/proc/sys/kernel/random/boot_id", nullptr, MS_BIND, nullptr) != 0)
          throw std::runtime_error("cannot give rank 3 a boot id of its own (mount namespace)");
      });
  unlink(fake.c_str());
  EXPECT_EQ(err, "");
}

// Rank 3 claims node 1 but has a /dev/shm of its own: node 1's ranks cannot meet, time out, and
// every rank (node 0's too, which set up fine) fails with the list, instead of waiting.
TEST(NcclMultinodeFail, NodeWithoutSharedMemory) {
  if (!mn::uts_available()) GTEST_SKIP() << "no UTS namespaces (needs root)";
  std::string err = mn::run_claimed(
      {"no shm", {0, 0, 1, 1}, 0, Claim::Uts}, {{"PEERLINK_TIMEOUT_MS", "2000"}},
      [&](int rank, const ncclUniqueId& id) {
        expect_init_fails(4, id, rank, {"setup failed on 2 ranks", "rank 2", "rank 3"}, 2.0 * 2 + 10.0);
      },
      60, "", [&](int rank) {
        if (rank != 3) return;
        if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64m") != 0)
          throw std::runtime_error("cannot give rank 3 a /dev/shm of its own (mount namespace)");
      });
  EXPECT_EQ(err, "");
}

// The real NCCL is the engine (test hook on the host backend) and cannot be loaded on node 1's
// ranks: every rank fails before any of them enters the real NCCL's init.
TEST(NcclMultinodeFail, RealNcclCannotBeLoaded) {
  std::string err = mn::run_claimed(
      {"no real nccl", {0, 0, 1, 1}, 0, Claim::HostId}, {{"PEERLINK_TEST_HIER_REAL_ENGINE", "1"}},
      [&](int rank, const ncclUniqueId& id) {
        if (rank >= 2) setenv("PEERLINK_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
        expect_init_fails(4, id, rank, {"real NCCL", "rank 2", "rank 3"}, 15.0);
      });
  EXPECT_EQ(err, "");
}

// The process that made the id is gone: a rank cannot reach the rendezvous and says why, at the
// timeout (it retries refused connections until then).
TEST(NcclMultinodeFail, RendezvousMakerGone) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t p = fork();
  if (p == 0) {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    (void)!write(fds[1], &id, sizeof id);
    _exit(r == ncclSuccess ? 0 : 1);
  }
  ncclUniqueId id;
  ASSERT_EQ(read(fds[0], &id, sizeof id), static_cast<ssize_t>(sizeof id));
  int st = 0;
  waitpid(p, &st, 0);
  close(fds[0]);
  close(fds[1]);
  setenv("PEERLINK_TIMEOUT_MS", "1000", 1);
  std::string err = run_ranks(1, [&](int) {
    expect_init_fails(2, id, 0, {"cannot reach", "must stay alive"}, 10.0);
  });
  setenv("PEERLINK_TIMEOUT_MS", "20000", 1);
  EXPECT_EQ(err, "");
}
