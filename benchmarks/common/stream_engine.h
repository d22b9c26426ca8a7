// bench_transport --mode stream: stream-ordered send/recv of peerlink (published-buffer form and
// NCCL form) and NCCL's ncclSend/ncclRecv side by side in the same two processes, nccl-tests style:
//   sendrecv  each rank sends to the next and receives from the previous, in one group per
//             iteration (nccl-tests' sendrecv_perf); time per iteration, GB/s = bytes / time;
//   pingpong  rank 0 sends, rank 1 receives and sends back; one-way = round trip / 2.
// Eager: `iters` iterations back to back on one stream, timed with events; -G: the same iterations
// captured once into a graph and the graph launch timed (so replays move new messages: the
// device-resident counters advance). Every row comes from a run whose payload was verified (once
// before and once after the timed loop). Host backend: synchronous calls, wall time, no graphs.
#pragma once
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nccl_dl.h"
#include "peerlink/device.h"
#include "peerlink/peerlink.h"

namespace bench {

struct StreamBenchConfig {
  std::vector<size_t> sizes;
  int iters = 20, warmup = 5;
  bool graph = false;
  bool nccl = true;
  std::string knobs;  // printed in the header (the Options::stream_* in effect)
};

class StreamBench {
 public:
  struct Impl {
    const char* name;
    std::function<void(size_t)> exchange;    // sendrecv: both directions in one group
    std::function<void(size_t, bool)> half;  // one direction: (bytes, this rank sends)
    char* out;                               // where the peer's bytes land here
  };

  StreamBench(peerlink::Communicator& comm, const StreamBenchConfig& c) : comm_(comm), c_(c) {}

  int run() {
    const int me = comm_.rank(), peer = 1 - me;
    const bool gpu = comm_.device() >= 0;
    size_t cap = 8;
    for (size_t s : c_.sizes) cap = std::max(cap, s);
    void* stream = nullptr;
    char *src = nullptr, *dst = nullptr, *pub = nullptr;
    if (gpu) {
      peerlink::device::set_current(comm_.device());
      stream = peerlink::device::stream_create();
      src = static_cast<char*>(peerlink::device::alloc(cap));
      dst = static_cast<char*>(peerlink::device::alloc(cap));
      ev0_ = peerlink::device::timing_event_create();
      ev1_ = peerlink::device::timing_event_create();
    } else {
      host_src_.resize(cap);
      host_dst_.resize(cap);
      src = host_src_.data();
      dst = host_dst_.data();
    }
    pub = static_cast<char*>(comm_.alloc(cap));
    comm_.notify_ipc_buffer(peer, kBufId, pub, cap, 1);
    comm_.barrier();
    std::string nccl_why = setup_nccl(gpu, stream);

    std::vector<Impl> impls;
    impls.push_back({"pl-published",
                     [&](size_t n) {
                       comm_.group_start();
                       comm_.recv(peer, kBufId, 0, n, stream);
                       comm_.send(peer, src, n, kBufId, 0, 1, stream);
                       comm_.group_end();
                     },
                     [&](size_t n, bool sender) {
                       if (sender) comm_.send(peer, src, n, kBufId, 0, 1, stream);
                       else comm_.recv(peer, kBufId, 0, n, stream);
                     },
                     pub});
    impls.push_back({"pl-nccl-form",
                     [&](size_t n) {
                       comm_.group_start();
                       comm_.send(peer, src, n, stream);
                       comm_.recv(peer, dst, n, stream);
                       comm_.group_end();
                     },
                     [&](size_t n, bool sender) {
                       if (sender) comm_.send(peer, src, n, stream);
                       else comm_.recv(peer, dst, n, stream);
                     },
                     dst});
    if (nccl_comm_)
      impls.push_back({"nccl",
                       [&](size_t n) {
                         nccl_check(lib_->group_start(), "ncclGroupStart");
                         nccl_check(lib_->send(src, n, /*ncclUint8*/ 1, peer, nccl_comm_, stream), "ncclSend");
                         nccl_check(lib_->recv(dst, n, 1, peer, nccl_comm_, stream), "ncclRecv");
                         nccl_check(lib_->group_end(), "ncclGroupEnd");
                       },
                       [&](size_t n, bool sender) {
                         if (sender) nccl_check(lib_->send(src, n, 1, peer, nccl_comm_, stream), "ncclSend");
                         else nccl_check(lib_->recv(dst, n, 1, peer, nccl_comm_, stream), "ncclRecv");
                       },
                       dst});
    if (me == 0) {
      std::printf("# bench_transport mode=stream device(rank0)=%d graph=%d iters=%d warmup=%d nccl=%s\n",
                  comm_.device(), int(c_.graph && gpu), c_.iters, c_.warmup,
                  nccl_comm_ ? ("yes, " + lib_->path()).c_str() : nccl_why.c_str());
      if (!c_.knobs.empty()) std::printf("# knobs: %s\n", c_.knobs.c_str());
      std::printf("# sendrecv: us per iteration (both ranks send and receive, one group); pingpong: one-way = "
                  "round trip / 2\n");
      std::printf("%12s %14s %12s %10s %12s %10s %8s\n", "bytes", "impl", "sendrecv_us", "GB/s", "oneway_us",
                  "GB/s", "wrong");
    }
    uint64_t wrong_total = 0;
    for (size_t n : c_.sizes) {
      for (Impl& im : impls) {
        uint64_t wrong = 0;
        double t_sr = time_pattern(im, n, /*pingpong=*/false, src, stream, gpu, wrong);
        double t_pp = time_pattern(im, n, /*pingpong=*/true, src, stream, gpu, wrong);
        wrong_total += wrong;
        if (me == 0)
          std::printf("%12zu %14s %12.2f %10.2f %12.2f %10.2f %8llu\n", n, im.name, t_sr, n / t_sr / 1e3, t_pp,
                      n / t_pp / 1e3, static_cast<unsigned long long>(wrong));
      }
    }
    std::fflush(stdout);
    comm_.barrier();
    if (gpu) {
      peerlink::device::free(src);
      peerlink::device::free(dst);
      peerlink::device::event_destroy(ev0_);
      peerlink::device::event_destroy(ev1_);
      peerlink::device::stream_destroy(stream);
    }
    return wrong_total ? 2 : 0;
  }

 private:
  static constexpr uint32_t kBufId = 100;
  using Clock = std::chrono::steady_clock;

  double time_pattern(Impl& im, size_t n, bool pingpong, char* src, void* stream, bool gpu, uint64_t& wrong) {
    const int me = comm_.rank();
    auto once = [&] {
      if (!pingpong) return im.exchange(n);
      im.half(n, me == 0);  // rank 0 -> rank 1, then back
      im.half(n, me != 0);
    };
    // Verified round: a fresh payload, the landing buffer cleared first.
    fill(src, n, gpu, uint64_t(n) * 4 + me + (pingpong ? 2 : 0));
    clear(im.out, n, gpu);
    comm_.barrier();
    once();
    sync(stream, gpu);
    wrong += verify(im.out, n, gpu, uint64_t(n) * 4 + (1 - me) + (pingpong ? 2 : 0));
    comm_.barrier();
    for (int i = 0; i < c_.warmup; ++i) once();
    sync(stream, gpu);
    peerlink::device::Graph g = nullptr;
    if (gpu && c_.graph) {
      peerlink::device::begin_capture(stream);
      for (int i = 0; i < c_.iters; ++i) once();
      g = peerlink::device::end_capture(stream);
      peerlink::device::graph_launch(g, stream);  // upload, untimed
      sync(stream, gpu);
    }
    comm_.barrier();
    auto t0 = Clock::now();
    if (gpu) peerlink::device::event_record(ev0_, stream);
    if (g) peerlink::device::graph_launch(g, stream);
    else for (int i = 0; i < c_.iters; ++i) once();
    if (gpu) peerlink::device::event_record(ev1_, stream);
    sync(stream, gpu);
    double us = gpu ? 1e3 * peerlink::device::elapsed_ms(ev0_, ev1_)
                    : std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (g) peerlink::device::graph_destroy(g);
    wrong += verify(im.out, n, gpu, uint64_t(n) * 4 + (1 - me) + (pingpong ? 2 : 0));  // same payload again
    comm_.barrier();
    return pingpong ? us / c_.iters / 2 : us / c_.iters;
  }

 private:
  void fill(char* p, size_t n, bool gpu, uint64_t tag) {
    std::vector<char> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = char(((tag + 1) * 0x9E3779B97F4A7C15ULL + i * 131) >> 29 | 1);
    if (gpu) peerlink::device::copy_sync(p, h.data(), n);
    else std::memcpy(p, h.data(), n);
  }
  void clear(char* p, size_t n, bool gpu) {
    std::vector<char> h(n, 0);
    if (gpu) peerlink::device::copy_sync(p, h.data(), n);
    else std::memcpy(p, h.data(), n);
  }
  uint64_t verify(const char* p, size_t n, bool gpu, uint64_t tag) {
    std::vector<char> h(n), want(n);
    if (gpu) peerlink::device::copy_sync(h.data(), p, n);
    else std::memcpy(h.data(), p, n);
    for (size_t i = 0; i < n; ++i) want[i] = char(((tag + 1) * 0x9E3779B97F4A7C15ULL + i * 131) >> 29 | 1);
    uint64_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += h[i] != want[i];
    return bad;
  }
  void nccl_check(int r, const char* what) { lib_->check(r, what); }
  static void sync(void* stream, bool gpu) {
    if (gpu) peerlink::device::stream_sync(stream);
  }

  // NCCL joins when both ranks load it; the ncclUniqueId travels over peerlink's own stream send.
  std::string setup_nccl(bool gpu, void* stream) {
    if (!gpu || !c_.nccl) return gpu ? "off" : "host backend";
    struct Wire {
      int32_t ok;
      nccl::UniqueId id;
    } mine{}, theirs{};
    std::string why;
    nccl::disable_nvls();
    lib_ = std::make_unique<nccl::Library>();
    if (!lib_->available()) why = lib_->why();
    else if (!lib_->send || !lib_->recv || !lib_->group_start || !lib_->group_end) why = "libnccl.so.2 lacks ncclSend/ncclRecv/ncclGroupStart/ncclGroupEnd";
    mine.ok = why.empty();
    if (mine.ok && comm_.rank() == 0) lib_->check(lib_->get_unique_id(&mine.id), "ncclGetUniqueId");
    char* d = static_cast<char*>(peerlink::device::alloc(2 * sizeof(Wire)));
    peerlink::device::copy_sync(d, &mine, sizeof mine);
    comm_.group_start();
    comm_.send(1 - comm_.rank(), d, sizeof(Wire), stream);
    comm_.recv(1 - comm_.rank(), d + sizeof(Wire), sizeof(Wire), stream);
    comm_.group_end();
    peerlink::device::stream_sync(stream);
    peerlink::device::copy_sync(&theirs, d + sizeof(Wire), sizeof theirs);
    peerlink::device::free(d);
    if (!mine.ok) return why;
    if (!theirs.ok) return "NCCL unavailable on the peer";
    const nccl::UniqueId& id = comm_.rank() == 0 ? mine.id : theirs.id;
    lib_->check(lib_->comm_init_rank(&nccl_comm_, 2, id, comm_.rank()), "ncclCommInitRank");
    return "";
  }

  peerlink::Communicator& comm_;
  const StreamBenchConfig& c_;
  std::vector<char> host_src_, host_dst_;
  peerlink::device::Event ev0_ = nullptr, ev1_ = nullptr;
  std::unique_ptr<nccl::Library> lib_;
  nccl::Comm nccl_comm_ = nullptr;
};

}  // namespace bench
