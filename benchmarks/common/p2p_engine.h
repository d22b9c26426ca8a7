// The measurement core shared by bench_transport and p2p_matrix: rank 0 and rank 1 of a
// communicator exchange verified messages through the public API and rank 0 times them.
//
// Every iteration starts with a "ready" token from rank 1 (sent after rank 1 verified the previous
// iteration and posted its receives), so neither side's verification or setup leaks into the timed
// region, and rank 1 is already waiting when rank 0 starts the clock.
//   latency:   rank 0 send_direct(ping) -> rank 1 irecv.wait -> rank 1 send_direct(pong) ->
//              rank 0 irecv.wait; one-way = round trip / 2 (what a receiver sees, not issue time).
//   bandwidth: rank 0 isends `window` messages into distinct slots; rank 1 waits for all and sends
//              an 8-byte ack; time = start to ack seen by rank 0.
//   bidir:     both ranks isend `window` messages at once (after a two-way ready handshake); rank 1
//              acks after its sends and receives; time = rank 0's ready token to the ack.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "pattern.h"
#include "report.h"
#include "peerlink/device.h"
#include "peerlink/peerlink.h"

namespace bench {

enum class Mode { Latency, Bandwidth, Bidir };
inline const char* to_string(Mode m) {
  return m == Mode::Latency ? "latency" : m == Mode::Bandwidth ? "bandwidth" : "bidir";
}

struct EngineConfig {
  Mode mode = Mode::Latency;
  std::vector<size_t> sizes;
  int iters = 20;
  int warmup = 5;
  int window = 8;
  size_t full_verify_limit = size_t(64) << 20;  // larger messages: sampled, except the last iteration
  size_t window_budget = size_t(4) << 30;       // cap on the receive buffer (window slots x size)
  // Version the engine publishes its buffers at: a later engine on the same communicator (new
  // buffers under the same ids) must use a higher one.
  uint64_t version = 1;
  // Test hook: each receiver zeroes one landed byte of its first message before verifying it, so
  // CI proves that a corrupted payload is counted in #wrong (the check can fail).
  bool inject_error = false;
};

constexpr uint32_t kDataBuf = 1;
constexpr uint32_t kCtrlBuf = 2;
constexpr size_t kReadyOff = 0, kAckOff = 8, kReportOff = 16, kCtrlBytes = 64;

class PairEngine {
 public:
  PairEngine(peerlink::Communicator& comm, const EngineConfig& cfg) : comm_(comm), cfg_(cfg) {
    if (comm.world_size() < 2) throw peerlink::InvalidArgument("the pair benchmark needs 2 ranks");
    me_ = comm.rank();
    peer_ = me_ == 0 ? 1 : 0;
    max_ = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
    int slots = cfg.mode == Mode::Latency ? 1 : std::max(1, cfg.window);
    size_t budget_slots = std::max<size_t>(1, cfg.window_budget / max_);
    recv_bytes_ = max_ * std::min<size_t>(slots, budget_slots);
    src_bytes_ = max_ + kShiftSpan + kCtrlBytes;  // pool, then a report word
    // Synchronous copies below run on the current device (device.h): make it this rank's.
    if (comm.device() >= 0) peerlink::device::set_current(comm.device());
    if (me_ <= 1) {
      recv_ = comm.alloc(recv_bytes_);
      ctrl_ = comm.alloc(kCtrlBytes);
      src_ = comm.alloc(src_bytes_);
      std::vector<unsigned char> mine = make_pool(seed_of(me_), max_ + kShiftSpan);
      peerlink::device::copy_sync(src_, mine.data(), mine.size());
      peer_pool_ = make_pool(seed_of(peer_), max_ + kShiftSpan);
      comm.notify_ipc_buffer(peer_, kDataBuf, recv_, recv_bytes_, cfg.version);
      comm.notify_ipc_buffer(peer_, kCtrlBuf, ctrl_, kCtrlBytes, cfg.version);
      comm.wait_ipc_buffer(peer_, kDataBuf, cfg.version);
      comm.wait_ipc_buffer(peer_, kCtrlBuf, cfg.version);
    }
    comm.barrier();
  }
  ~PairEngine() {
    try {
      comm_.barrier();  // the peer may still be copying into our buffers
    } catch (...) {
    }
    if (recv_) comm_.free(recv_);
    if (ctrl_) comm_.free(ctrl_);
    if (src_) comm_.free(src_);
  }

  // Collective over ranks 0 and 1 (others only take part in the barriers). Rank 0's results
  // carry timings and the #wrong of both ranks.
  std::vector<SizeResult> run() {
    std::vector<SizeResult> out;
    for (size_t s : cfg_.sizes) out.push_back(run_one(s));
    finish();
    return out;
  }
  // The same, one size at a time, for callers that measure something else between sizes (the raw
  // anchors of bench_transport's latency mode): run_one per size, then finish() once.
  SizeResult run_one(size_t size) { return run_size(size); }
  void finish() { comm_.barrier(); }

 private:
  static uint64_t seed_of(int rank) { return 0x5eed0000ull + static_cast<uint64_t>(rank) * 7919; }
  char* at(void* p, size_t off) const { return static_cast<char*>(p) + off; }

  // Sends/receives one 8-byte control token (ready or ack) to/from the peer's control buffer.
  void token_send(size_t off) { comm_.send_direct(peer_, src_, 8, kCtrlBuf, cfg_.version, off); }
  peerlink::Request token_recv(size_t off) { return comm_.irecv(peer_, kCtrlBuf, off, 8); }

  SizeResult run_size(size_t size) {
    SizeResult r;
    r.bytes = size;
    if (me_ > 1) {
      comm_.barrier();
      return r;
    }
    const int window = cfg_.mode == Mode::Latency ? 1
                       : static_cast<int>(std::min<size_t>(cfg_.window, recv_bytes_ / size));
    r.window = window;
    const bool sends = cfg_.mode != Mode::Bandwidth || me_ == 0;
    const bool receives = cfg_.mode != Mode::Bandwidth || me_ == 1;
    std::vector<double> times;
    uint64_t wrong = 0;
    const int total = cfg_.warmup + cfg_.iters;
    for (int it = 0; it < total; ++it) {
      // Receives match sends in FIFO order per direction: rank 1 -> rank 0 carries ready, then
      // data (latency pong / bidir), then ack; rank 0 -> rank 1 carries (bidir only) ready, then
      // data. Each rank posts its receives in that order. In bidir rank 1 also writes into rank 0's
      // buffer, so it waits for rank 0's ready too (rank 0 may still be verifying); rank 0 starts
      // the clock before sending that token, so the handshake is inside, not outside, the time.
      const bool bidir = cfg_.mode == Mode::Bidir;
      std::vector<peerlink::Request> recvs, sends_req;
      peerlink::Request ready;
      if (me_ == 0 || bidir) ready = token_recv(kReadyOff);
      if (receives)
        for (int j = 0; j < window; ++j) recvs.push_back(comm_.irecv(peer_, kDataBuf, size_t(j) * size, size));
      double secs = 0;
      if (me_ == 1) token_send(kReadyOff);
      if (me_ == 0) ready.wait();
      auto t0 = std::chrono::steady_clock::now();
      if (bidir) {
        if (me_ == 0) token_send(kReadyOff);
        else ready.wait();
      }
      if (cfg_.mode == Mode::Latency) {
        if (me_ == 0) {
          comm_.send_direct(peer_, at(src_, shift_of(sent_)), size, kDataBuf, cfg_.version, 0);
          recvs[0].wait();
        } else {
          recvs[0].wait();
          comm_.send_direct(peer_, at(src_, shift_of(sent_)), size, kDataBuf, cfg_.version, 0);
        }
        ++sent_;
      } else {
        peerlink::Request ack;
        if (me_ == 0) ack = token_recv(kAckOff);
        if (sends)
          for (int j = 0; j < window; ++j)
            sends_req.push_back(comm_.isend(peer_, at(src_, shift_of(sent_ + j)), size, kDataBuf, size_t(j) * size, cfg_.version));
        for (auto& q : sends_req) q.wait();
        for (auto& q : recvs) q.wait();
        if (me_ == 1) token_send(kAckOff);
        else ack.wait();
        if (sends) sent_ += window;
      }
      secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (it >= cfg_.warmup) times.push_back(secs);
      if (receives) {
        const bool last = it == total - 1;
        for (int j = 0; j < window; ++j) {
          const unsigned char* expect = peer_pool_.data() + shift_of(received_ + j);
          if (cfg_.inject_error && received_ + j == 0) {
            const unsigned char zero = 0;
            peerlink::device::copy_sync(at(recv_, size_t(j) * size), &zero, 1);
          }
          wrong += verify_landed(at(recv_, size_t(j) * size), expect, size,
                                 last ? ~size_t(0) : cfg_.full_verify_limit, received_ * 31 + j, scratch_);
        }
        received_ += window;
      }
    }
    // Rank 1 reports its mismatches to rank 0 through the control buffer.
    if (me_ == 1) {
      peerlink::device::copy_sync(at(src_, max_ + kShiftSpan), &wrong, 8);
      comm_.send_direct(0, at(src_, max_ + kShiftSpan), 8, kCtrlBuf, cfg_.version, kReportOff);
    } else {
      comm_.irecv(1, kCtrlBuf, kReportOff, 8).wait();
      uint64_t peer_wrong = 0;
      peerlink::device::copy_sync(&peer_wrong, at(ctrl_, kReportOff), 8);
      wrong += peer_wrong;
    }
    comm_.barrier();
    r.wrong = wrong;
    r.iters = cfg_.iters;
    if (me_ == 0) fill_stats(r, times, window, size);
    return r;
  }

  void fill_stats(SizeResult& r, std::vector<double>& times, int window, size_t size) const {
    // Latency: one-way = RTT / 2. Bandwidth/bidir: time per message = iteration / window.
    double div = cfg_.mode == Mode::Latency ? 2.0 : static_cast<double>(window);
    for (double& t : times) t = t / div * 1e6;
    r.p50_us = percentile(times, 50);
    r.p99_us = percentile(times, 99);
    r.mean_us = mean(times);
    double bytes_per_msg = static_cast<double>(size) * (cfg_.mode == Mode::Bidir ? 2.0 : 1.0);
    r.gbps = r.p50_us > 0 ? bytes_per_msg / (r.p50_us * 1e-6) / 1e9 : 0;
  }

  peerlink::Communicator& comm_;
  EngineConfig cfg_;
  int me_ = 0, peer_ = 1;
  size_t max_ = 0, recv_bytes_ = 0, src_bytes_ = 0;
  void* recv_ = nullptr;
  void* ctrl_ = nullptr;
  void* src_ = nullptr;
  std::vector<unsigned char> peer_pool_, scratch_;
  uint64_t sent_ = 0, received_ = 0;  // data messages per direction, drive the payload shifts
};

}  // namespace bench
