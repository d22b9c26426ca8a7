// Unit tests of the SHM building blocks: segments (create/open/stale replacement/unlink), the SPSC
// ring (order, full, corrupted indices), the doorbell, process liveness.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <sys/wait.h>
#include <thread>

#include "common/futex.h"
#include "common/proc.h"
#include "common/shm_segment.h"
#include "peerlink/errors.h"
#include "shm/spsc_ring.h"
#include "support/mp.h"

using namespace peerlink;

TEST(Segment, CreateOpenUnlink) {
  std::string name = common::shm_prefix_for(pltest::unique_test_id("seg")) + "a";
  auto s = common::Segment::create(name, 1000, 42, [](void* p) { static_cast<char*>(p)[0] = 'x'; });
  auto o = common::Segment::open(name);
  ASSERT_TRUE(o.valid());
  EXPECT_EQ(o.payload_bytes(), 1000u);
  EXPECT_EQ(static_cast<char*>(o.payload())[0], 'x');
  EXPECT_EQ(o.header().tag, 42u);
  EXPECT_TRUE(o.owner_alive());
  EXPECT_THROW(common::Segment::create(name, 10, 0), Error);  // live owner
  s.unlink();
  EXPECT_FALSE(common::Segment::open(name).valid());
}

TEST(Segment, StaleSegmentOfDeadOwnerIsReplaced) {
  std::string prefix = common::shm_prefix_for(pltest::unique_test_id("stale"));
  std::string name = prefix + "b";
  pid_t pid = fork();
  if (pid == 0) {
    auto s = common::Segment::create(name, 64, 1);
    _exit(0);  // dies without unlinking
  }
  waitpid(pid, nullptr, 0);
  auto old = common::Segment::open(name);
  ASSERT_TRUE(old.valid());
  EXPECT_FALSE(old.owner_alive());
  auto fresh = common::Segment::create(name, 128, 2);
  EXPECT_EQ(common::Segment::open(name).payload_bytes(), 128u);
  fresh.unlink();
  // remove_stale_segments removes dead owners' segments only.
  pid = fork();
  if (pid == 0) {
    auto s = common::Segment::create(prefix + "c", 64, 1);
    _exit(0);
  }
  waitpid(pid, nullptr, 0);
  auto live = common::Segment::create(prefix + "d", 64, 1);
  EXPECT_EQ(common::remove_stale_segments(prefix), 1);
  EXPECT_EQ(common::list_segments(prefix), std::vector<std::string>{prefix + "d"});
  live.unlink();
}

TEST(Segment, TruncatedOrForeignFileIsRejected) {
  std::string name = common::shm_prefix_for(pltest::unique_test_id("junk")) + "j";
  FILE* f = fopen(("/dev/shm/" + name).c_str(), "w");
  fputs("not a segment", f);
  fclose(f);
  EXPECT_THROW(common::Segment::open(name), Error);
  unlink(("/dev/shm/" + name).c_str());
}

TEST(Ring, FifoFullAndEmpty) {
  std::vector<char> mem(shm::SpscRing::bytes_for(8), 0);
  shm::SpscRing::init(mem.data(), 8);
  shm::SpscRing r(mem.data(), 8);
  shm::RingMsg m{};
  EXPECT_FALSE(r.pop(&m));
  for (uint64_t i = 0; i < 8; ++i) {
    m.seq = i;
    EXPECT_TRUE(r.push(m));
  }
  EXPECT_FALSE(r.push(m));  // full
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(r.pop(&m));
    EXPECT_EQ(m.seq, i);
  }
  EXPECT_TRUE(r.empty());
  EXPECT_THROW(shm::SpscRing(mem.data(), 16), Error);  // capacity mismatch
}

TEST(Ring, CorruptedProducerIndexThrows) {
  std::vector<char> mem(shm::SpscRing::bytes_for(4), 0);
  shm::SpscRing::init(mem.data(), 4);
  shm::SpscRing r(mem.data(), 4);
  reinterpret_cast<shm::RingHeader*>(mem.data())->tail.value = 1000;  // a hostile peer
  shm::RingMsg m;
  EXPECT_THROW(r.pop(&m), Error);
}

TEST(Ring, TwoThreadsKeepOrder) {
  std::vector<char> mem(shm::SpscRing::bytes_for(64), 0);
  shm::SpscRing::init(mem.data(), 64);
  shm::SpscRing prod(mem.data(), 64), cons(mem.data(), 64);
  const uint64_t n = 20000;
  std::atomic<bool> give_up{false};
  std::thread t([&] {
    shm::RingMsg m{};
    for (uint64_t i = 1; i <= n && !give_up.load(std::memory_order_relaxed);) {
      m.seq = i;
      m.arg0 = i * 3;
      if (prod.push(m)) ++i;
    }
  });
  // Counts instead of asserting in the loop: an assertion's early return would leave the producer
  // joinable (std::terminate hides the failure) or spinning on a full ring.
  uint64_t expect = 1, wrong = 0;
  shm::RingMsg m;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (expect <= n && std::chrono::steady_clock::now() < deadline)
    if (cons.pop(&m)) {
      if (m.seq != expect || m.arg0 != expect * 3) ++wrong;
      ++expect;
    }
  give_up = true;
  t.join();
  EXPECT_EQ(expect, n + 1) << "messages missing after 20 s";
  EXPECT_EQ(wrong, 0u) << "messages out of order or torn";
}

TEST(Doorbell, WakesASleeper) {
  common::Doorbell bell{};
  std::atomic<bool> woke{false};
  uint32_t t0 = bell.prepare();
  std::thread t([&] {
    bell.wait(t0, std::chrono::seconds(5));
    woke = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto start = std::chrono::steady_clock::now();
  bell.ring();
  t.join();
  EXPECT_TRUE(woke);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(Proc, LivenessByPidAndStartTime) {
  common::ProcId me = common::self_proc_id();
  EXPECT_TRUE(common::process_alive(me));
  common::ProcId reused = me;
  reused.start_time += 1;  // same pid, another process
  EXPECT_FALSE(common::process_alive(reused));
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(common::process_start_time(pid), 0u);  // a zombie counts as dead
  waitpid(pid, nullptr, 0);
}
