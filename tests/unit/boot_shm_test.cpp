// Regression tests of the SHM layer and the host backend: corrupt segment headers, alloc sizes
// near SIZE_MAX, segment names read from shared memory, a full /dev/shm. Crash-prone cases run in
// a forked child, so a crash fails the test, not the suite.
#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/shm_segment.h"
#include "gpu/backend.h"
#include "peerlink/errors.h"
#include "support/mp.h"

using namespace peerlink;

namespace {

void write_file(const std::string& name, const std::vector<unsigned char>& bytes) {
  int fd = ::open(("/dev/shm/" + name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

}  // namespace

// A file with a full-size but corrupt header used to be unmapped and then read (SIGSEGV).
TEST(BootSegment, CorruptHeaderIsTypedErrorNotCrash) {
  const std::string pre = common::shm_prefix_for(pltest::unique_test_id("corrupt"));
  std::vector<unsigned char> junk(8192, 0xA5);
  write_file(pre + "junk", junk);
  // Right magic, wrong payload size (claims more than the file holds).
  std::vector<unsigned char> lying(8192, 0);
  common::SegmentHeader h{};
  h.magic = common::kSegmentMagic;
  h.payload_bytes = 1 << 20;
  std::memcpy(lying.data(), &h, sizeof h);
  write_file(pre + "lying", lying);
  std::string fails = pltest::run_ranks(1, [&](int) {
    MP_CHECK_THROWS(common::Segment::open(pre + "junk"), Error, "invalid header", "8192");
    MP_CHECK_THROWS(common::Segment::open(pre + "lying"), Error, "payload 1048576", "file 8192");
  });
  EXPECT_EQ(fails, "");
  ::unlink(("/dev/shm/" + pre + "junk").c_str());
  ::unlink(("/dev/shm/" + pre + "lying").c_str());
}

TEST(BootSegment, ParseHeaderIsPureAndChecksSizes) {
  common::SegmentHeader h{};
  h.magic = common::kSegmentMagic;
  h.payload_bytes = 100;
  EXPECT_EQ(common::parse_segment_header(&h, sizeof h, common::kSegmentHeaderBytes + 100, "x").payload_bytes, 100u);
  EXPECT_THROW(common::parse_segment_header(&h, sizeof h, common::kSegmentHeaderBytes + 99, "x"), Error);
  EXPECT_THROW(common::parse_segment_header(&h, sizeof h - 1, common::kSegmentHeaderBytes + 100, "x"), Error);
  EXPECT_THROW(common::parse_segment_header(&h, sizeof h, 10, "x"), Error);
  h.payload_bytes = UINT64_MAX - common::kSegmentHeaderBytes + 1;  // wraps back to a "valid" file size
  EXPECT_THROW(common::parse_segment_header(&h, sizeof h, 0, "x"), Error);
}

// N near SIZE_MAX wrapped header + n and returned a pointer into a tiny mapping.
TEST(BootAlloc, SizesNearSizeMaxAreInvalidArgumentNamingN) {
  const std::string pre = common::shm_prefix_for(pltest::unique_test_id("huge")) + "r0_";
  auto be = gpu::make_backend(-1, pre);
  for (size_t n : {SIZE_MAX, SIZE_MAX - 4095, SIZE_MAX - 4096, SIZE_MAX / 2 + 1, size_t(1) << 63}) {
    try {
      be->alloc(n);
      ADD_FAILURE() << "alloc(" << n << ") returned";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(n)), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(common::Segment::create(pre + "x", SIZE_MAX - 100, 0), InvalidArgument);
  EXPECT_TRUE(common::list_segments(pre).empty());
  void* ok = be->alloc(4096);  // still usable
  std::memset(ok, 1, 4096);
  be->free(ok);
}

// A handle's segment name comes from shared memory; only "<job>r<peer>_m<id>" of another rank
// of this job may be opened (not our own allocations, not other jobs, no paths).
TEST(BootPeerNames, ForgedSegmentNamesAreRejected) {
  const std::string job = common::shm_prefix_for(pltest::unique_test_id("names"));
  auto me = gpu::make_backend(-1, job + "r0_");
  auto peer = gpu::make_backend(-1, job + "r1_");
  void* mine = me->alloc(4096);
  void* theirs = peer->alloc(8192);
  gpu::MemHandle good = peer->export_allocation(peer->find_allocation(theirs, 1));
  void* mapped = me->open(good);  // the legitimate case works
  static_cast<char*>(mapped)[5] = 'z';
  EXPECT_EQ(static_cast<char*>(theirs)[5], 'z');
  me->close(good, mapped);

  gpu::MemHandle own = me->export_allocation(me->find_allocation(mine, 1));
  auto forged = [&](const std::string& name, uint64_t id, uint64_t bytes) {
    gpu::MemHandle h = good;
    std::memset(h.data, 0, sizeof h.data);
    std::memcpy(h.data, name.data(), std::min(name.size(), sizeof h.data));
    h.alloc_id = id;
    h.alloc_bytes = bytes;
    return h;
  };
  std::string own_name(reinterpret_cast<const char*>(own.data));
  std::vector<gpu::MemHandle> bad = {
      own,                                                     // our own private allocation
      forged(job + "r1_m1/../../../etc/passwd", 1, 8192),      // path traversal
      forged("../../etc/passwd", 1, 8192),
      forged(common::shm_prefix_for("other-job") + "00000000_r1_m1", 1, 8192),  // another job
      forged(job + "r1_x1", 1, 8192),                          // not an allocation
      forged(job + "r01_m1", 1, 8192),                         // rank not in canonical form
      forged(job + "boot", 0, 8192),                           // the rendezvous segment
      forged(job + "r1_m1", 2, 8192),                          // wrong allocation id
      forged(job + "r1_m1", 1, 4096),                          // wrong size
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_THROW(me->open(bad[i]), Error) << "case " << i;
  }
  EXPECT_EQ(static_cast<char*>(mine)[0], 0);
  me->free(mine);
  peer->free(theirs);
}

// A segment larger than /dev/shm can hold fails at creation with SysError (ENOSPC) naming the
// size and `df /dev/shm`, instead of a SIGBUS at first touch; nothing is left behind.
TEST(BootShmFull, ReservationFailureIsSysErrorNotSigbus) {
  struct statvfs vfs {};
  ASSERT_EQ(statvfs("/dev/shm", &vfs), 0);
  if (vfs.f_blocks == 0) GTEST_SKIP() << "/dev/shm has no size limit";
  const uint64_t total = uint64_t(vfs.f_blocks) * vfs.f_frsize;
  const std::string pre = common::shm_prefix_for(pltest::unique_test_id("full")) + "r0_";
  auto be = gpu::make_backend(-1, pre);
  const size_t n = total + (1 << 20);
  try {
    be->alloc(n);
    ADD_FAILURE() << "alloc(" << n << ") larger than /dev/shm succeeded";
  } catch (const SysError& e) {
    EXPECT_EQ(e.error_code(), ENOSPC);
    EXPECT_EQ(e.call(), "posix_fallocate");
    EXPECT_NE(std::string(e.what()).find("df /dev/shm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(n + common::kSegmentHeaderBytes)), std::string::npos) << e.what();
  }
  EXPECT_TRUE(common::list_segments(pre).empty());
}

// A full /dev/shm, the other way a reservation fails (a file size limit): typed, in a child with RLIMIT_FSIZE.
TEST(BootShmFull, FileSizeLimitIsSysError) {
  const std::string pre = common::shm_prefix_for(pltest::unique_test_id("fsize")) + "r0_";
  std::string fails = pltest::run_ranks(1, [&](int) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl {1 << 20, 1 << 20};
    MP_CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    auto be = gpu::make_backend(-1, pre);
    try {
      be->alloc(8 << 20);
      MP_CHECK_MSG(false, "alloc past RLIMIT_FSIZE succeeded");
    } catch (const SysError& e) {
      MP_CHECK_MSG(e.error_code() == EFBIG, e.what());
      MP_CHECK_MSG(std::string(e.what()).find("df /dev/shm") != std::string::npos, e.what());
    }
    void* p = be->alloc(4096);  // small ones still work
    be->free(p);
  });
  EXPECT_EQ(fails, "");
  EXPECT_TRUE(common::list_segments(pre).empty());
}
