// Regression tests of the bootstrap layer, in real processes: a corrupt or stale rendezvous
// segment, the same rank claimed twice and two jobs of one id started at once (a clean error or a
// correct job, never a split), a timed-out barrier marked out of step, a dead rank detected by the
// barrier within ~100 ms and its allocations removed; a rendezvous that failed for good (a late
// rank fails at once, a rerun starts fresh).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

#include "bootstrap/bootstrap.h"
#include "common/format.h"
#include "common/log.h"
#include "gpu/backend.h"
#include "peerlink/peerlink.h"
#include "support/mp.h"

using namespace peerlink;
using namespace std::chrono;
using pltest::run_ranks;

namespace {

// Results of forked processes, in an anonymous shared mapping made before fork().
enum Outcome : int { kNone = 0, kJoinedJob = 1, kDuplicate = 2, kTimedOut = 3, kOther = 4 };
struct Report {
  std::atomic<int> outcome;
  int rank;
  uint64_t nonce;
  char msg[240];
};
struct Board {
  std::atomic<int> go;
  std::atomic<int> reported;
  std::atomic<int64_t> t_ns;  // a steady_clock time point written by one process, read by another
  Report r[8];
};

Board* new_board() {
  void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return static_cast<Board*>(p);  // zeroed
}

int64_t now_ns() { return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count(); }

void report(Board* b, int i, Outcome o, int rank, uint64_t nonce, const std::string& msg) {
  b->r[i].rank = rank;
  b->r[i].nonce = nonce;
  std::snprintf(b->r[i].msg, sizeof b->r[i].msg, "%s", msg.c_str());
  b->r[i].outcome.store(o);
  b->reported.fetch_add(1);
}

// Process i joins as rank ranks[i] of a world of 2 as soon as `go` is set. Members stay in the job
// until every process reported, so a late arrival meets the live segment (not a finished job's
// unlinked name) and must resolve against it.
void contend(Board* b, int i, int n, int rank, const std::string& uid, microseconds delay) {
  while (!b->go.load()) {
  }
  std::this_thread::sleep_for(delay);
  try {
    bootstrap::Bootstrap boot(uid, rank, 2, milliseconds(8000));
    boot.barrier(milliseconds(8000));
    report(b, i, kJoinedJob, rank, boot.nonce(), "");
    for (auto end = steady_clock::now() + seconds(10); b->reported.load() < n && steady_clock::now() < end;)
      std::this_thread::sleep_for(microseconds(200));
    boot.unlink_name();
  } catch (const InvalidArgument& e) {
    report(b, i, kDuplicate, rank, 0, e.what());
  } catch (const TimeoutError& e) {
    report(b, i, kTimedOut, rank, 0, e.what());
  } catch (const std::exception& e) {
    report(b, i, kOther, rank, 0, e.what());
  }
}

// Runs `rounds` rounds of processes with the given ranks (all at once, same id) and checks each
// round: exactly one job of ranks {0, 1} formed (same nonce), every other process got the
// duplicate-rank InvalidArgument. A split shows as timeouts or two nonces.
void stress_same_id(const std::vector<int>& ranks, int rounds) {
  const int n = static_cast<int>(ranks.size());
  Board* b = new_board();
  for (int round = 0; round < rounds; ++round) {
    std::memset(static_cast<void*>(b), 0, sizeof *b);
    const std::string uid = pltest::unique_test_id("same");
    std::thread starter([&] {
      std::this_thread::sleep_for(milliseconds(5));  // let every child reach the spin
      b->go.store(1);
    });
    // Rank 1 arrives from at once to 2 ms later, across rounds: late enough, in some rounds, to
    // find the segment after a losing rank 0 (possibly its creator) gave up and exited.
    const microseconds late(ranks.size() == 3 ? (round % 5) * 500 : (round % 3) * 500);
    // The second claimant of rank 0 comes 0-150 us after the first: around the first one's window
    // between publishing the segment it created and claiming its slot.
    const microseconds second((round % 4) * 50);
    std::string fails = run_ranks(n, [&](int i) {
      contend(b, i, n, ranks[i], uid, ranks[i] == 1 ? late : i == 0 ? microseconds(0) : second);
    }, seconds(30));
    starter.join();
    ASSERT_EQ(fails, "") << "round " << round;
    int joined = 0, dup = 0, seen_ranks = 0;
    uint64_t nonce = 0;
    std::string why;
    for (int i = 0; i < n; ++i) {
      const Report& r = b->r[i];
      why += "proc " + std::to_string(i) + " rank " + std::to_string(ranks[i]) + ": " +
             std::to_string(r.outcome.load()) + " " + r.msg + "\n";
      if (r.outcome == kJoinedJob) {
        ++joined;
        seen_ranks |= 1 << r.rank;
        if (nonce == 0) nonce = r.nonce;
        EXPECT_EQ(r.nonce, nonce) << "round " << round << ": two jobs formed (split)\n" << why;
      } else if (r.outcome == kDuplicate) {
        ++dup;
        EXPECT_NE(std::string(r.msg).find("already taken by live pid"), std::string::npos) << r.msg;
      }
    }
    ASSERT_EQ(joined, 2) << "round " << round << "\n" << why;
    ASSERT_EQ(seen_ranks, 3) << "round " << round << "\n" << why;
    ASSERT_EQ(dup, n - 2) << "round " << round << "\n" << why;
    ASSERT_TRUE(pltest::leftover_segments(uid).empty()) << "round " << round;
  }
  munmap(b, sizeof *b);
}

}  // namespace

// Two processes claim rank 0 at the same instant (one of them usually creates the segment
// and may lose the claim): one job forms, the other gets a clean error. Was a split in 6-16 %.
TEST(BootRendezvous, SameRankClaimedTwiceNeverSplits) { stress_same_id({0, 0, 1}, 60); }

// Two jobs (ranks 0 and 1 each) with the same id started at once: one job of one rank 0 and
// one rank 1 forms, the two others get the duplicate error; never two half jobs timing out.
TEST(BootRendezvous, TwoJobsWithOneIdAtOnceNeverSplit) { stress_same_id({0, 1, 0, 1}, 60); }

// A corrupt leftover "pl_..._boot" (no live process holds it) is replaced, not a crash.
TEST(BootRendezvous, CorruptLeftoverBootIsReplaced) {
  for (size_t size : {size_t(10), size_t(8192)}) {
    const std::string uid = pltest::unique_test_id("cboot");
    const std::string path = "/dev/shm/" + common::shm_prefix_for(uid) + "boot";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    std::vector<char> junk(size, 'J');
    ASSERT_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(size));
    ::close(fd);
    std::string fails = run_ranks(2, [&](int rank) {
      Options o;
      o.timeout = milliseconds(10000);
      Communicator comm(uid, rank, 2, kHostDevice, o);
      comm.barrier();
    });
    EXPECT_EQ(fails, "") << size << "-byte leftover";
    EXPECT_TRUE(pltest::leftover_segments(uid).empty());
  }
}

// A corrupt "boot" file that a live process holds is not ours to replace: typed Error.
TEST(BootRendezvous, CorruptBootHeldByLiveProcessIsTypedError) {
  const std::string uid = pltest::unique_test_id("hboot");
  const std::string path = "/dev/shm/" + common::shm_prefix_for(uid) + "boot";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  std::vector<char> junk(8192, 'H');
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), 8192);
  ASSERT_EQ(flock(fd, LOCK_SH), 0);
  std::string fails = run_ranks(1, [&](int) {
    MP_CHECK_THROWS(bootstrap::Bootstrap(uid, 0, 2, milliseconds(3000)), Error,
                    "held by a live process", "invalid header");
  });
  EXPECT_EQ(fails, "");
  ::close(fd);
  ::unlink(path.c_str());
}

// A rendezvous whose only member was killed mid-rendezvous (its slot says "joined" by a dead
// pid, nobody holds the file) is stale and replaced by the next run of the id.
TEST(BootRendezvous, SegmentOfKilledRunIsReplaced) {
  const std::string uid = pltest::unique_test_id("kboot");
  std::string fails = run_ranks(1, [&](int) {
    bootstrap::Bootstrap(uid, 0, 2, milliseconds(60000));  // waits for rank 1
  }, milliseconds(300), {0});
  EXPECT_NE(fails, "");  // killed at the limit, as intended
  EXPECT_FALSE(pltest::leftover_segments(uid).empty());
  fails = run_ranks(2, [&](int rank) {
    bootstrap::Bootstrap boot(uid, rank, 2, milliseconds(10000));
    boot.barrier(milliseconds(10000));
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

// A barrier that timed out has published its arrival; the next barrier of that rank must
// refuse (out of step) instead of pairing with the peer's next one.
TEST(BootBarrier, TimedOutBarrierIsMarkedOutOfStep) {
  const std::string uid = pltest::unique_test_id("bto");
  std::string fails = run_ranks(2, [&](int rank) {
    bootstrap::Bootstrap boot(uid, rank, 2, milliseconds(10000));
    boot.unlink_name();
    if (rank == 0) {
      MP_CHECK_THROWS(boot.barrier(milliseconds(200)), TimeoutError, "ranks that did not arrive: 1");
      MP_CHECK(boot.interrupted());
      MP_CHECK(boot.out_of_step_reason() == "timed out");
      auto t0 = steady_clock::now();
      MP_CHECK_THROWS(boot.barrier(milliseconds(3000)), Error, "timed out", "close the communicator");
      MP_CHECK(steady_clock::now() - t0 < milliseconds(100));  // refused at once, paired with nothing
      std::this_thread::sleep_for(milliseconds(1500));          // stay until rank 1 is done
    } else {
      std::this_thread::sleep_for(milliseconds(600));
      boot.barrier(milliseconds(3000));  // passes on rank 0's published (timed-out) arrival
      // Rank 0 refuses its next barrier, so ours must fail, not pair with a retry.
      MP_CHECK_THROWS(boot.barrier(milliseconds(500)), TimeoutError, "ranks that did not arrive: 0");
    }
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
}

// A rank killed while the other waits in a barrier is detected within ~100 ms (liveness is
// checked every Bootstrap::kLivenessInterval), and its host allocations are removed right then.
TEST(BootBarrier, DeadRankDetectedPromptlyAndItsAllocationsRemoved) {
  const std::string uid = pltest::unique_test_id("bdead");
  Board* b = new_board();
  std::string fails = run_ranks(2, [&](int rank) {
    bootstrap::Bootstrap boot(uid, rank, 2, milliseconds(10000));
    boot.unlink_name();
    auto be = gpu::make_backend(-1, common::format("{}r{}_", boot.job_prefix(), rank));
    void* p = be->alloc(1 << 16);
    std::memset(p, 7, 1 << 16);
    boot.barrier(milliseconds(10000));
    if (rank == 1) {
      // Rank 0 is asleep in its barrier by now. The odd part keeps the death from lining up with
      // rank 0's liveness checks (every 50 ms from the barrier's start), so latency is measured fairly.
      std::this_thread::sleep_for(milliseconds(300 + getpid() % 50));
      b->t_ns.store(now_ns());
      kill(getpid(), SIGKILL);
    }
    MP_CHECK_THROWS(boot.barrier(milliseconds(10000)), PeerLostError, "rank 1", "died");
    int64_t latency_ms = (now_ns() - b->t_ns.load()) / 1000000;
    std::fprintf(stderr, "[rank 0] barrier noticed rank 1's death after %lld ms\n", static_cast<long long>(latency_ms));
    MP_CHECK_MSG(latency_ms < 400, latency_ms << " ms");
    MP_CHECK(common::list_segments(boot.job_prefix() + "r1_").empty());
    MP_CHECK(!common::list_segments(boot.job_prefix() + "r0_").empty());  // ours stay
    be->free(p);
  }, seconds(30), {1});
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
  munmap(b, sizeof *b);
}

namespace {

// Whether rank r's slot of the rendezvous of `uid` says joined (read from /dev/shm: the test knows
// the layout; the library never trusts it this way).
bool slot_joined(const std::string& uid, int r) {
  const std::string path = "/dev/shm/" + common::shm_prefix_for(uid) + "boot";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t bytes = common::kSegmentHeaderBytes + sizeof(bootstrap::BootLayout);
  void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return false;
  const auto* l = reinterpret_cast<const bootstrap::BootLayout*>(static_cast<const char*>(p) + common::kSegmentHeaderBytes);
  const bool joined = l->slots[r].state.load() == bootstrap::kJoined;
  munmap(p, bytes);
  return joined;
}

Options boot_options(int ms) {
  Options o;
  o.timeout = milliseconds(ms);
  return o;
}

// One run of world 3: rank 1 joins and is killed during the rendezvous, rank 0 sees it and fails;
// only then does rank 2 arrive. `late` false: rank 2 never comes (the failed segment stays).
void run_failed_rendezvous(const std::string& uid, Board* b, bool late) {
  std::string fails = run_ranks(3, [&](int rank) {
    if (rank == 1) {
      std::thread killer([&] {
        // Killed once rank 0 has joined too (before, the segment would be an unowned leftover to it).
        for (auto end = steady_clock::now() + seconds(10);
             !(slot_joined(uid, 0) && slot_joined(uid, 1)) && steady_clock::now() < end;)
          std::this_thread::sleep_for(milliseconds(1));
        kill(getpid(), SIGKILL);
      });
      killer.detach();
      Communicator comm(uid, 1, 3, kHostDevice, boot_options(20000));
      MP_CHECK_MSG(false, "rank 1 should have died in the rendezvous");
    } else if (rank == 0) {
      MP_CHECK_THROWS(Communicator(uid, 0, 3, kHostDevice, boot_options(20000)), PeerLostError, "rank 1", "died");
      b->go.store(1);
    } else if (late) {
      while (!b->go.load()) std::this_thread::sleep_for(microseconds(200));
      const auto t0 = steady_clock::now();
      MP_CHECK_THROWS(Communicator(uid, 2, 3, kHostDevice, boot_options(20000)), PeerLostError, "rank 1", "died",
                      "already failed");
      const auto ms = duration_cast<milliseconds>(steady_clock::now() - t0).count();
      MP_CHECK_MSG(ms < 500, "the late rank failed after " << ms << " ms");
    }
  }, seconds(60), {1});
  ASSERT_EQ(fails, "");
}

}  // namespace

// World 3: rank 1 dies during the rendezvous, rank 0 notices and throws; rank 2 arrives after that.
// The failure is recorded in the segment, so rank 2 fails at once with PeerLostError naming rank 1
// instead of waiting out its timeout for "ranks that never arrived: 0, 1". 20 runs.
TEST(BootRendezvous, LateRankOfFailedRendezvousFailsAtOnce) {
  Board* b = new_board();
  for (int run = 0; run < 20; ++run) {
    std::memset(static_cast<void*>(b), 0, sizeof *b);
    const std::string uid = pltest::unique_test_id("lateboot");
    run_failed_rendezvous(uid, b, true);
    ASSERT_TRUE(pltest::leftover_segments(uid).empty()) << "run " << run;  // the late rank was the last
  }
  munmap(b, sizeof *b);
}

// The segment of a failed rendezvous that a rank never came to stays behind, unowned; processes
// started after the failure are a rerun of the id, not late ranks: they replace it and form the job.
TEST(BootRendezvous, RerunAfterFailedRendezvousStartsFresh) {
  Board* b = new_board();
  const std::string uid = pltest::unique_test_id("rerunboot");
  run_failed_rendezvous(uid, b, false);
  EXPECT_FALSE(pltest::leftover_segments(uid).empty());  // kept for rank 2, which never came
  std::this_thread::sleep_for(milliseconds(20));  // start times have a 10 ms resolution
  std::string fails = run_ranks(3, [&](int rank) {
    Communicator comm(uid, rank, 3, kHostDevice, boot_options(20000));
    comm.barrier();
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(pltest::leftover_segments(uid).empty());
  munmap(b, sizeof *b);
}

// Three processes claim ranks {0, 1, 1} of one communicator at once, 200 times: every time one of
// the two rank-1 processes gets InvalidArgument naming the pid that holds the rank and the other two
// form the job (no TimeoutError: the loser once let go of the segment while the winner was between
// its claim and its pid store, the job formed and removed the name, and the loser waited alone in
// a fresh rendezvous).
TEST(BootRendezvous, SameRankClaimedTwiceByCommunicatorsAlwaysOneJob) {
  Board* b = new_board();
  const int ranks[3] = {0, 1, 1};
  for (int round = 0; round < 200; ++round) {
    std::memset(static_cast<void*>(b), 0, sizeof *b);
    const std::string uid = pltest::unique_test_id("dup");
    std::string fails = run_ranks(3, [&](int i) {
      // All three start together (no starter thread in the parent: a fork of a multi-threaded
      // process cannot start threads under TSan).
      b->go.fetch_add(1);
      while (b->go.load() < 3) {
      }
      try {
        Communicator comm(uid, ranks[i], 2, kHostDevice, boot_options(5000));
        comm.barrier();
        report(b, i, kJoinedJob, ranks[i], 0, "");
        // Members stay until the loser reported: it must meet the live job, whenever it comes.
        for (auto end = steady_clock::now() + seconds(10); b->reported.load() < 3 && steady_clock::now() < end;)
          std::this_thread::sleep_for(microseconds(200));
      } catch (const InvalidArgument& e) {
        report(b, i, kDuplicate, ranks[i], 0, e.what());
      } catch (const TimeoutError& e) {
        report(b, i, kTimedOut, ranks[i], 0, e.what());
      } catch (const std::exception& e) {
        report(b, i, kOther, ranks[i], 0, e.what());
      }
    }, seconds(30));
    ASSERT_EQ(fails, "") << "round " << round;
    int joined = 0, dup = 0;
    std::string why;
    for (int i = 0; i < 3; ++i) {
      const Report& r = b->r[i];
      why += "proc " + std::to_string(i) + " rank " + std::to_string(ranks[i]) + ": " + std::to_string(r.outcome.load()) +
             " " + r.msg + "\n";
      joined += r.outcome == kJoinedJob;
      if (r.outcome == kDuplicate) {
        ++dup;
        EXPECT_EQ(ranks[i], 1) << why;
        EXPECT_NE(std::string(r.msg).find("already taken by live pid"), std::string::npos) << r.msg;
      }
    }
    ASSERT_EQ(joined, 2) << "round " << round << "\n" << why;
    ASSERT_EQ(dup, 1) << "round " << round << "\n" << why;
    ASSERT_TRUE(pltest::leftover_segments(uid).empty()) << "round " << round;
  }
  munmap(b, sizeof *b);
}
