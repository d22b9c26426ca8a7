// ncclCommWindowRegister / ncclCommWindowDeregister on peerlink communicators (api_misc.cpp: they
// are peerlink's registered windows, peerlink/windows.h), host backend (host pointers from
// ncclMemAlloc, which peerlink cannot export: the windows register without the zero-copy path and
// collectives on them run as on any buffer). Covers the argument checks, registration across
// processes, collectives on window buffers with verified payloads (all_gather, in place too,
// broadcast, all-to-all), unknown / double / NULL deregistration, registration queued in a group
// (one thread driving two communicators, as nccl-tests -g 2 -R 2), the INFO line saying whether a
// window is zero-copy capable, and a communicator destroyed with a window still registered.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nccl_harness.h"

namespace {

int32_t val(int rank, size_t i, int salt) { return static_cast<int32_t>(rank * 100003 + i * 7 + salt); }

// Runs all_gather (out of place and in place), broadcast (root 1) and all_to_all on buffers inside
// the windows `send` / `recv` of `c`; every payload verified.
void collectives_on_windows(ncclComm_t c, int rank, int n, int32_t* send, int32_t* recv, size_t count, int salt) {
  for (size_t i = 0; i < count; ++i) send[i] = val(rank, i, salt);
  std::memset(recv, 0, n * count * 4);
  CHECK_NCCL(ncclAllGather(send, recv, count, ncclInt32, c, nullptr));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) CHECK(recv[r * count + i] == val(r, i, salt));
  // In place: this rank's block of recv is the input.
  std::memset(recv, 0, n * count * 4);
  for (size_t i = 0; i < count; ++i) recv[rank * count + i] = val(rank, i, salt + 1);
  CHECK_NCCL(ncclAllGather(recv + rank * count, recv, count, ncclInt32, c, nullptr));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) CHECK(recv[r * count + i] == val(r, i, salt + 1));
  std::memset(recv, 0, count * 4);
  CHECK_NCCL(ncclBroadcast(send, recv, count, ncclInt32, 1, c, nullptr));
  for (size_t i = 0; i < count; ++i) CHECK(recv[i] == val(1, i, salt));
  // all_to_all: block q of rank r's input goes to rank q.
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i) recv[q * count + i] = val(rank, q * count + i, salt + 2);
  std::vector<int32_t> in(recv, recv + n * count);
  CHECK_NCCL(ncclAlltoAll(in.data(), recv, count, ncclInt32, c, nullptr));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) CHECK(recv[r * count + i] == val(r, rank * count + i, salt + 2));
  // In place, on that output: all_to_all twice is the identity, so this rank's input comes back.
  CHECK_NCCL(ncclAlltoAll(recv, recv, count, ncclInt32, c, nullptr));
  for (size_t i = 0; i < n * count; ++i) CHECK(recv[i] == in[i]);
}

}  // namespace

TEST(NcclWindows, RegisterCollectivesDeregisterThreeProcesses) {
  ncclUniqueId id = new_id();
  const int n = 3;
  std::string err = run_ranks(n, [&](int rank) {
    ncclComm_t c = nullptr;
    CHECK_NCCL(ncclCommInitRank(&c, n, id, rank));
    const size_t max_count = 70001;
    void *s = nullptr, *r = nullptr, *extra = nullptr;
    CHECK_NCCL(ncclMemAlloc(&s, n * max_count * 4));
    CHECK_NCCL(ncclMemAlloc(&r, n * max_count * 4));
    CHECK_NCCL(ncclMemAlloc(&extra, 4096));
    // Argument checks are local (nothing collective starts): null pointer, size 0, null handle.
    ncclWindow_t ws = nullptr, wr = nullptr, w = nullptr;
    CHECK(ncclCommWindowRegister(c, nullptr, 64, &w, NCCL_WIN_COLL_SYMMETRIC) == ncclInvalidArgument);
    CHECK(ncclCommWindowRegister(c, r, 0, &w, NCCL_WIN_COLL_SYMMETRIC) == ncclInvalidArgument);
    CHECK(ncclCommWindowRegister(c, r, 64, nullptr, NCCL_WIN_COLL_SYMMETRIC) == ncclInvalidArgument);
    CHECK(ncclCommWindowRegister(nullptr, r, 64, &w, NCCL_WIN_COLL_SYMMETRIC) == ncclInvalidArgument);
    // Collective registrations, every rank in the same order.
    CHECK_NCCL(ncclCommWindowRegister(c, s, n * max_count * 4, &ws, NCCL_WIN_COLL_SYMMETRIC));
    CHECK_NCCL(ncclCommWindowRegister(c, r, n * max_count * 4, &wr, NCCL_WIN_COLL_SYMMETRIC));
    CHECK(ws && wr && ws != wr);
    int salt = 0;
    for (size_t count : {size_t(1), size_t(1000), max_count})
      collectives_on_windows(c, rank, n, static_cast<int32_t*>(s), static_cast<int32_t*>(r), count, salt += 10);
    // Deregistration: NULL is a no-op (as NCCL); a handle this communicator never gave out, or one
    // deregistered already, is ncclInvalidArgument.
    CHECK_NCCL(ncclCommWindowDeregister(c, nullptr));
    int not_a_window = 0;
    CHECK(ncclCommWindowDeregister(c, reinterpret_cast<ncclWindow_t>(&not_a_window)) == ncclInvalidArgument);
    CHECK(std::string(ncclGetLastError(c)).find("unknown window") != std::string::npos);
    CHECK(ncclCommWindowDeregister(nullptr, wr) == ncclInvalidArgument);
    CHECK_NCCL(ncclCommWindowDeregister(c, wr));
    CHECK(ncclCommWindowDeregister(c, wr) == ncclInvalidArgument);  // twice
    // The buffers work as plain ones once deregistered, and register again.
    collectives_on_windows(c, rank, n, static_cast<int32_t*>(s), static_cast<int32_t*>(r), 777, 1);
    CHECK_NCCL(ncclCommWindowRegister(c, r, n * max_count * 4, &wr, NCCL_WIN_COLL_SYMMETRIC));
    collectives_on_windows(c, rank, n, static_cast<int32_t*>(s), static_cast<int32_t*>(r), 4099, 2);
    // Registration and deregistration inside a group run at its end, in call order with the
    // collectives queued there.
    ncclWindow_t wg = nullptr;
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclCommWindowRegister(c, extra, 4096, &wg, NCCL_WIN_COLL_SYMMETRIC));
    CHECK(wg != nullptr);  // the handle exists at once
    CHECK_NCCL(ncclGroupEnd());
    auto* e = static_cast<int32_t*>(extra);
    for (int q = 0; q < n; ++q) e[q] = 0;
    e[rank] = val(rank, 0, 3);
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclAllGather(e + rank, e, 1, ncclInt32, c, nullptr));
    CHECK_NCCL(ncclCommWindowDeregister(c, wg));
    CHECK(ncclCommWindowDeregister(c, wg) == ncclInvalidArgument);  // queued already: unknown now
    CHECK_NCCL(ncclGroupEnd());
    for (int q = 0; q < n; ++q) CHECK(e[q] == val(q, 0, 3));
    // Without NCCL_WIN_COLL_SYMMETRIC the handle registers nothing with peerlink (no symmetric
    // promise), and deregisters alike.
    CHECK_NCCL(ncclCommWindowRegister(c, extra, 4096, &wg, NCCL_WIN_DEFAULT));
    collectives_on_windows(c, rank, n, static_cast<int32_t*>(s), static_cast<int32_t*>(r), 5, 4);
    CHECK_NCCL(ncclCommWindowDeregister(c, wg));
    CHECK_NCCL(ncclCommWindowDeregister(c, ws));
    // wr stays registered: the communicator's teardown releases it.
    CHECK_NCCL(ncclCommDestroy(c));
    for (void* p : {s, r, extra}) CHECK_NCCL(ncclMemFree(p));
  });
  EXPECT_EQ(err, "");
}

// nccl-tests -g 2 -R 2: one thread, two communicators of one process, windows registered for both
// inside one group (registrations run concurrently at the group end, or rank 0's would wait for
// rank 1's forever). NCCL_DEBUG=INFO says that the windows are not zero-copy capable here
// (ncclMemAlloc's host memory is not exportable).
TEST(NcclWindows, OneThreadTwoCommunicatorsGroupRegistrationAndInfoLine) {
  std::string err = run_ranks(1, [&](int) {
    char path[] = "/tmp/pl_nccl_win_log.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    int saved = dup(2);
    CHECK(saved >= 0 && dup2(fd, 2) == 2);
    setenv("NCCL_DEBUG", "INFO", 1);
    ncclUniqueId id = new_id();
    ncclComm_t c[2] = {nullptr, nullptr};
    CHECK_NCCL(ncclGroupStart());
    for (int i = 0; i < 2; ++i) CHECK_NCCL(ncclCommInitRank(&c[i], 2, id, i));
    CHECK_NCCL(ncclGroupEnd());
    const size_t count = 5000;
    void* buf[2][2] = {};
    ncclWindow_t w[2][2] = {};
    for (auto& b : buf)
      for (void*& p : b) CHECK_NCCL(ncclMemAlloc(&p, 2 * count * 4));
    CHECK_NCCL(ncclGroupStart());
    for (int k = 0; k < 2; ++k)
      for (int j = 0; j < 2; ++j)
        CHECK_NCCL(ncclCommWindowRegister(c[k], buf[k][j], 2 * count * 4, &w[k][j], NCCL_WIN_COLL_SYMMETRIC));
    CHECK_NCCL(ncclGroupEnd());
    for (int iter = 0; iter < 3; ++iter) {
      for (int k = 0; k < 2; ++k) {
        auto* in = static_cast<int32_t*>(buf[k][0]);
        for (size_t i = 0; i < count; ++i) in[i] = val(k, i, iter);
      }
      CHECK_NCCL(ncclGroupStart());
      for (int k = 0; k < 2; ++k) CHECK_NCCL(ncclAllGather(buf[k][0], buf[k][1], count, ncclInt32, c[k], nullptr));
      CHECK_NCCL(ncclGroupEnd());
      for (int k = 0; k < 2; ++k) {
        auto* out = static_cast<int32_t*>(buf[k][1]);
        for (int r = 0; r < 2; ++r)
          for (size_t i = 0; i < count; ++i) CHECK(out[r * count + i] == val(r, i, iter));
      }
    }
    CHECK_NCCL(ncclGroupStart());
    for (int k = 0; k < 2; ++k)
      for (int j = 0; j < 2; ++j) CHECK_NCCL(ncclCommWindowDeregister(c[k], w[k][j]));
    CHECK_NCCL(ncclGroupEnd());
    for (auto* cc : c) CHECK_NCCL(ncclCommDestroy(cc));
    for (auto& b : buf)
      for (void* p : b) CHECK_NCCL(ncclMemFree(p));
    dup2(saved, 2);
    close(saved);
    close(fd);
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    unlink(path);
    const std::string log = ss.str();
    CHECK(log.find("is peerlink window") != std::string::npos);
    CHECK(log.find("not zero-copy capable") != std::string::npos);
    CHECK(log.find("deregistered") != std::string::npos);
  });
  EXPECT_EQ(err, "");
}
