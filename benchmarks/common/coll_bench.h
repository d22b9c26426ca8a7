// Parts of bench_collectives: configuration, one implementation's entry, the NCCL side (plain and
// window-registered, through nccl_dl.h) and the nccl-tests style table printed by rank 0. The
// table's implementations, in column order: peerlink, peerlink-reg (its buffers registered with
// peerlink::register_window), nccl, nccl-reg.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "allreduce_data.h"
#include "nccl_dl.h"
#include "peerlink/communicator.h"
#include "table_report.h"

namespace bench::coll {

enum class Coll { AllGather, ReduceScatter, Broadcast, Reduce, AllToAll };
const char* const kCollNames[] = {"all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall"};
constexpr int kImpls = 4;  // peerlink, peerlink-reg, nccl, nccl-reg

struct Config {
  Coll op = Coll::AllGather;
  size_t min_bytes = 8, max_bytes = size_t(32) << 20, factor = 2;
  int iters = 20, warmup = 5, check = 1, graph = 0, nranks = 0, root = 0;
  bench::Dt dt = bench::Dt::F32;
  bench::Op redop = bench::Op::Sum;
  std::vector<int> gpus;
  int time_limit_s = 900;
  bool threads = false;  // --threads: the ranks as threads of one process (launch.h thread_ranks)
  bool pl_register = true;  // --pl-register: the peerlink-reg column
  bool pl_plain = true;     // --pl-plain: the plain peerlink column
};

// One implementation: run(count) issues one collective of the current size on `stream` with its
// own send/recv buffers (count = elements per rank's piece, as the collectives' APIs take it).
struct Impl {
  const char* name = "";
  bool available = false;
  std::string why;   // when unavailable
  std::string note;  // said after "available"
  void* send = nullptr;
  void* recv = nullptr;
  std::function<void(size_t, void*)> run;
  std::function<void()> after_sync;
  // Around each size's measurement (collective, every rank): begin(send bytes, recv bytes) before
  // the first call of the size, end() after its last one (peerlink-reg: register / deregister).
  std::function<void(size_t, size_t)> begin;
  std::function<void()> end;
};

struct Row {
  double time_us = 0;
  uint64_t wrong = 0;
  bool ok = false;
};


// NCCL columns: "nccl" runs on the peerlink-allocated buffers, "nccl-reg" on ncclMemAlloc buffers
// registered as a symmetric window (collective registration, like nccl-tests -R 2). Both only when
// every rank has its own GPU and libnccl.so.2 loads; registration only when the symbols exist.
class NcclSide {
 public:
  NcclSide(const Config& c, peerlink::Communicator& comm, const std::vector<int>& devs, void* send, void* recv,
           size_t bytes, Impl& plain, Impl& reg)
      : comm_(comm) {
    plain.name = "nccl";
    reg.name = "nccl-reg";
    const int me = comm.rank(), n = comm.world_size();
    std::string why;
    for (int r = 0; r < n && why.empty(); ++r) {
      if (devs[r] < 0) why = "host backend (no GPU)";
      for (int q = 0; q < r && why.empty(); ++q)
        if (devs[q] == devs[r]) why = "ranks share GPU " + std::to_string(devs[r]);
    }
    if (why.empty()) {
      lib_ = std::make_unique<nccl::Library>();
      if (!lib_->available()) why = lib_->why();
      else if (!(c.op == Coll::AllGather ? lib_->all_gather != nullptr
                 : c.op == Coll::ReduceScatter ? lib_->reduce_scatter != nullptr
                 : c.op == Coll::Broadcast ? lib_->broadcast != nullptr
                 : c.op == Coll::Reduce ? lib_->reduce != nullptr
                                        : (lib_->send && lib_->recv && lib_->group_start && lib_->group_end)))
        why = "libnccl.so.2 lacks this collective";
    }
    struct Wire { int32_t ok; nccl::UniqueId id; } mine{}, all[64];
    mine.ok = why.empty() ? 1 : 0;
    if (mine.ok && me == 0) lib_->check(lib_->get_unique_id(&mine.id), "ncclGetUniqueId");
    comm.allgather_bytes(&mine, sizeof mine, all);
    for (int r = 0; r < n; ++r)
      if (!all[r].ok && why.empty()) why = "NCCL unavailable on rank " + std::to_string(r);
    if (!why.empty()) {
      plain.why = reg.why = why;
      return;
    }
    lib_->check(lib_->comm_init_rank(&ncomm_, n, all[0].id, me), "ncclCommInitRank");
    if (me == 0) std::printf("# nccl version %d from %s\n", lib_->version(), lib_->path().c_str());
    set_run(c, plain, send, recv);
    if (lib_->mem_alloc && lib_->window_register && lib_->window_deregister && lib_->mem_free) {
      lib_->check(lib_->mem_alloc(&rsend_, bytes), "ncclMemAlloc");
      lib_->check(lib_->mem_alloc(&rrecv_, bytes), "ncclMemAlloc");
      lib_->check(lib_->window_register(ncomm_, rsend_, bytes, &wsend_, nccl::Library::kWinCollSymmetric),
                  "ncclCommWindowRegister");
      lib_->check(lib_->window_register(ncomm_, rrecv_, bytes, &wrecv_, nccl::Library::kWinCollSymmetric),
                  "ncclCommWindowRegister");
      set_run(c, reg, rsend_, rrecv_);
    } else {
      reg.why = "NCCL < 2.27: no ncclCommWindowRegister";
    }
  }
  void close() {
    if (!ncomm_) return;
    if (wsend_) lib_->window_deregister(ncomm_, wsend_);
    if (wrecv_) lib_->window_deregister(ncomm_, wrecv_);
    if (rsend_) lib_->mem_free(rsend_);
    if (rrecv_) lib_->mem_free(rrecv_);
    lib_->comm_destroy(ncomm_);
    ncomm_ = nullptr;
  }
  ~NcclSide() { close(); }

 private:
  void set_run(const Config& c, Impl& impl, void* send, void* recv) {
    impl.available = true;
    impl.send = send;
    impl.recv = recv;
    nccl::Library* l = lib_.get();
    nccl::Comm* nc = &ncomm_;
    const int dt = c.dt == Dt::F32 ? nccl::Float32 : c.dt == Dt::F16 ? nccl::Float16 : c.dt == Dt::BF16 ? nccl::Bfloat16
                 : c.dt == Dt::F64 ? nccl::Float64 : c.dt == Dt::I32 ? nccl::Int32 : nccl::Int64;
    const int op = c.redop == Op::Sum ? nccl::Sum : c.redop == Op::Prod ? nccl::Prod : c.redop == Op::Max ? nccl::Max : c.redop == Op::Min ? nccl::Min : nccl::Avg;
    const size_t es = dt_size(c.dt);
    const int n = comm_.world_size();
    impl.run = [l, nc, dt, op, es, n, send, recv, kind = c.op, root = c.root](size_t cnt, void* st) {
      switch (kind) {
        case Coll::AllGather: l->check(l->all_gather(send, recv, cnt, dt, *nc, st), "ncclAllGather"); break;
        case Coll::ReduceScatter: l->check(l->reduce_scatter(send, recv, cnt, dt, op, *nc, st), "ncclReduceScatter"); break;
        case Coll::Broadcast: l->check(l->broadcast(send, recv, cnt, dt, root, *nc, st), "ncclBroadcast"); break;
        case Coll::Reduce: l->check(l->reduce(send, recv, cnt, dt, op, root, *nc, st), "ncclReduce"); break;
        case Coll::AllToAll:  // as nccl-tests: grouped send/recv
          l->check(l->group_start(), "ncclGroupStart");
          for (int p = 0; p < n; ++p) {
            l->check(l->send(static_cast<const char*>(send) + p * cnt * es, cnt, dt, p, *nc, st), "ncclSend");
            l->check(l->recv(static_cast<char*>(recv) + p * cnt * es, cnt, dt, p, *nc, st), "ncclRecv");
          }
          l->check(l->group_end(), "ncclGroupEnd");
          break;
      }
    };
  }
  peerlink::Communicator& comm_;
  std::unique_ptr<nccl::Library> lib_;
  nccl::Comm ncomm_ = nullptr;
  void *rsend_ = nullptr, *rrecv_ = nullptr, *wsend_ = nullptr, *wrecv_ = nullptr;
};

// Rows gathered from every rank (max time, summed #wrong), printed by rank 0 as nccl-tests does.
class Reporter {
 public:
  Reporter(const Config& c, peerlink::Communicator& comm, const Impl* impls) : c_(c), comm_(comm), impls_(impls) {
    n_ = comm.world_size();
    const int k = static_cast<int>(c.op);
    factor_ = (c.op == Coll::Broadcast || c.op == Coll::Reduce) ? 1.0 : double(n_ - 1) / n_;
    if (comm.rank() != 0) return;
    std::printf("# bench_collectives op=%s nranks=%d type=%s redop=%s root=%d iters=%d warmup=%d graph=%d\n",
                kCollNames[k], n_, dt_name(c.dt), op_name(c.redop), c.root, c.iters, c.warmup, c.graph ? 1 : 0);
    for (int i = 0; i < kImpls; ++i) table::print_availability(impls_[i].name, impls_[i].available, impls_[i].why, impls_[i].note);
    std::printf("#%11s %12s %8s %6s %5s", "size", "count", "type", "redop", "root");
    table::print_cell_heads(kImpls);
    std::printf("\n#%11s %12s %8s %6s %5s", "(B)", "(elements)", "", "", "");
    table::print_cell_units(kImpls);
    std::printf("\n");
    std::fflush(stdout);
  }
  void add(size_t bytes, size_t count, const Row rows[kImpls]) {
    const std::vector<table::Cell> cells = table::gather(comm_, rows, kImpls);
    if (comm_.rank() != 0) return;
    const bool rooted = c_.op == Coll::Broadcast || c_.op == Coll::Reduce;
    std::printf(" %11zu %12zu %8s %6s %5d", bytes, count, dt_name(c_.dt),
                c_.op == Coll::ReduceScatter || c_.op == Coll::Reduce ? op_name(c_.redop) : "none", rooted ? c_.root : -1);
    for (int k = 0; k < kImpls; ++k) {
      if (!impls_[k].available) {
        table::print_unavailable_cell();
        continue;
      }
      const table::Cell& x = cells[k];
      if (!x.ok) {
        ++failures_;
        table::print_error_cell();
        continue;
      }
      double algbw = table::algbw(bytes, x.time_us);
      wrong_ += x.wrong;
      busbw_[k] += algbw * factor_;
      ++rows_[k];
      table::print_cell(x.time_us, algbw, algbw * factor_, x.wrong, c_.check);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  int finish() {
    if (comm_.rank() != 0) return 0;
    table::print_wrong_total(wrong_, c_.check);
    for (int k = 0; k < kImpls; ++k)
      if (rows_[k]) table::print_avg_busbw(impls_[k].name, busbw_[k] / rows_[k]);
    return table::exit_code(wrong_, failures_);
  }

 private:
  const Config& c_;
  peerlink::Communicator& comm_;
  const Impl* impls_;
  int n_ = 0;
  double factor_ = 1;
  uint64_t wrong_ = 0;
  int failures_ = 0;
  double busbw_[kImpls] = {};
  int rows_[kImpls] = {};
};

}  // namespace bench::coll
