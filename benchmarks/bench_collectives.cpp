// bench_collectives: nccl-tests style benchmark of all_gather, reduce_scatter, broadcast, reduce and
// all-to-all, peerlink and NCCL side by side in the same forked ranks: peerlink on plain buffers,
// peerlink on the same buffers registered as windows (peerlink::register_window once per size,
// deregistered after it: all_gather, all_to_all, broadcast, reduce and reduce_scatter may then
// take the zero-copy path, peerlink/windows.h; --pl-register 0 leaves that column out), plain NCCL
// (same buffers as
// peerlink) and NCCL on ncclMemAlloc buffers registered with ncclCommWindowRegister
// (NCCL_WIN_COLL_SYMMETRIC, NCCL >= 2.27: its symmetric kernels, nccl-tests -R 2). NCCL is loaded
// with dlopen when present (GPU machines); on the host backend only peerlink runs.
//   bench_collectives --op all_gather -b 8 -e 128M -f 2 -n 20 -w 5 -d bfloat16 [-G 1] [-r ROOT]
// Columns as nccl-tests: size (B) is the total per rank (all_gather: the output, reduce_scatter: the
// input, alltoall: either buffer), time (us per op, max over ranks), algbw = size / time, busbw =
// algbw x (n-1)/n (all_gather, reduce_scatter, alltoall) or x 1 (broadcast, reduce), #wrong
// (elements that differ from the exact result, summed over ranks, checked before and after the
// timed loop; inputs are small integers, exact in every type).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "common/allreduce_data.h"
#include "common/cli.h"
#include "common/coll_bench.h"
#include "common/launch.h"
#include "common/nccl_dl.h"
#include "common/pl_types.h"
#include "common/warmup.h"
#include "peerlink/collectives.h"
#include "peerlink/device.h"
#include "peerlink/peerlink.h"
#include "peerlink/windows.h"

namespace {

using namespace bench::coll;
using Clock = std::chrono::steady_clock;
const char* kUsage =
    "usage: bench_collectives --op all_gather|reduce_scatter|broadcast|reduce|alltoall [-b MIN] [-e MAX]\n"
    "  [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [-G 0|1] [-d float|half|bfloat16|double|int32|int64]\n"
    "  [-o sum|prod|max|min|avg] [-r ROOT] [-g NRANKS] [--gpus D0,D1,..] [--time-limit S] [--nccl 0|1] [--threads]\n"
    "  [--pl-register 0|1] [--pl-plain 0|1]\n"
    "  (--nccl 0: peerlink only, no NCCL communicator; --pl-register 0: no peerlink-reg column (peerlink's\n"
    "  buffers registered as windows); --pl-plain 0: no plain peerlink column (e.g. with\n"
    "  PEERLINK_<OP>_ALGO=zero_copy, which refuses buffers outside windows); PEERLINK_* variables choose\n"
    "  the algorithms;\n"
    "  --threads: the ranks as threads of one process, the single-GPU stand-in with --gpus 0,0)\n";
bool g_nccl = true;  // --nccl

Config parse(int argc, char** argv) {
  Config c;
  bench::Args a(argc, argv);
  while (a.next()) {
    if (a.flag("--op")) {
      std::string v = a.value();
      int k = -1;
      for (int i = 0; i < 5; ++i)
        if (v == kCollNames[i]) k = i;
      if (v == "all_to_all") k = 4;
      if (k < 0) throw bench::UsageError("--op '" + v + "' is not all_gather, reduce_scatter, broadcast, reduce, alltoall");
      c.op = static_cast<Coll>(k);
    } else if (a.flag("-b", "--minbytes")) c.min_bytes = bench::parse_size(a.value());
    else if (a.flag("-e", "--maxbytes")) c.max_bytes = bench::parse_size(a.value());
    else if (a.flag("-f", "--stepfactor")) c.factor = static_cast<size_t>(bench::parse_int("-f", a.value(), 2, 1 << 20));
    else if (a.flag("-n", "--iters")) c.iters = static_cast<int>(bench::parse_int("-n", a.value(), 1, 1 << 24));
    else if (a.flag("-w", "--warmup_iters")) c.warmup = static_cast<int>(bench::parse_int("-w", a.value(), 0, 1 << 24));
    else if (a.flag("-c", "--check")) c.check = static_cast<int>(bench::parse_int("-c", a.value(), 0, 1));
    else if (a.flag("-G", "--cudagraph")) c.graph = bench::parse_int("-G", a.value(), 0, 1 << 20) > 0;
    else if (a.flag("-g", "--nranks")) c.nranks = static_cast<int>(bench::parse_int("-g", a.value(), 1, 8));
    else if (a.flag("-r", "--root")) c.root = static_cast<int>(bench::parse_int("-r", a.value(), 0, 7));
    else if (a.flag("-d", "--datatype")) {
      try { c.dt = bench::parse_dt(a.value()); } catch (const std::invalid_argument& e) { throw bench::UsageError(e.what()); }
    } else if (a.flag("-o", "--redop")) {
      try { c.redop = bench::parse_op(a.value()); } catch (const std::invalid_argument& e) { throw bench::UsageError(e.what()); }
    } else if (a.flag("--gpus")) c.gpus = bench::parse_int_list("--gpus", a.value());
    else if (a.flag("--nccl")) g_nccl = bench::parse_int("--nccl", a.value(), 0, 1) != 0;
    else if (a.flag("--threads")) c.threads = true;
    else if (a.flag("--pl-register")) c.pl_register = bench::parse_int("--pl-register", a.value(), 0, 1) != 0;
    else if (a.flag("--pl-plain")) c.pl_plain = bench::parse_int("--pl-plain", a.value(), 0, 1) != 0;
    else if (a.flag("--time-limit")) c.time_limit_s = static_cast<int>(bench::parse_int("--time-limit", a.value(), 1, 86400));
    else if (a.flag("-h", "--help")) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else throw bench::UsageError("unknown flag '" + a.current() + "'");
  }
  return c;
}

using bench::to_pl;  // common/pl_types.h
// Elements per call for a size row: nccl-tests' size is the per-rank total, so the piece count
// is size / n for all_gather, reduce_scatter and alltoall.
struct Shape {
  size_t piece = 0, send_elems = 0, recv_elems = 0;
};
Shape shape_of(Coll op, size_t elems, int n) {
  Shape s;
  switch (op) {
    case Coll::AllGather: s.piece = elems / n, s.send_elems = s.piece, s.recv_elems = s.piece * n; break;
    case Coll::ReduceScatter: s.piece = elems / n, s.send_elems = s.piece * n, s.recv_elems = s.piece; break;
    case Coll::AllToAll: s.piece = elems / n, s.send_elems = s.recv_elems = s.piece * n; break;
    default: s.piece = s.send_elems = s.recv_elems = elems; break;
  }
  return s;
}

// Inputs and expected outputs from AllreducePattern: piece q of rank r uses seed + q * 7919, so a
// piece at the wrong place or from the wrong rank does not match.
struct Data {
  const Config& c;
  int me, n;
  bench::AllreducePattern pat;
  Data(const Config& cfg, int rank, int world) : c(cfg), me(rank), n(world), pat(cfg.dt, cfg.redop, world) {}
  size_t es() const { return bench::dt_size(c.dt); }
  std::vector<unsigned char> input(const Shape& s, uint64_t seed) const {
    std::vector<unsigned char> v(s.send_elems * es());
    bool per_peer = c.op == Coll::ReduceScatter || c.op == Coll::AllToAll;
    for (int q = 0; q < (per_peer ? n : 1); ++q)
      pat.fill_input(me, seed + (per_peer ? q : 0) * 7919, s.piece, v.data() + q * s.piece * es());
    return v;
  }
  uint64_t wrong(const Shape& s, uint64_t seed, const unsigned char* got) const {
    std::vector<unsigned char> want(s.piece * es());
    auto diff = [&](const unsigned char* g) {
      uint64_t bad = 0;
      for (size_t i = 0; i < s.piece; ++i) bad += std::memcmp(g + i * es(), want.data() + i * es(), es()) != 0;
      return bad;
    };
    switch (c.op) {
      case Coll::AllGather: {
        uint64_t bad = 0;
        for (int r = 0; r < n; ++r) {
          pat.fill_input(r, seed, s.piece, want.data());
          bad += diff(got + r * s.piece * es());
        }
        return bad;
      }
      case Coll::AllToAll: {
        uint64_t bad = 0;
        for (int r = 0; r < n; ++r) {
          pat.fill_input(r, seed + me * 7919, s.piece, want.data());
          bad += diff(got + r * s.piece * es());
        }
        return bad;
      }
      case Coll::Broadcast: pat.fill_input(c.root, seed, s.piece, want.data()); return diff(got);
      case Coll::ReduceScatter: return pat.count_wrong(seed + me * 7919, s.piece, got);
      case Coll::Reduce: return me == c.root ? pat.count_wrong(seed, s.piece, got) : 0;
    }
    return 0;
  }
};

Row measure(const Config& c, Impl& impl, const Data& data, const Shape& s, uint64_t seed, void* stream,
            peerlink::Communicator& comm) {
  Row row;
  const size_t es = data.es();
  auto sync = [&] {
    if (stream) peerlink::device::stream_sync(stream);
    if (impl.after_sync) impl.after_sync();
  };
  auto check = [&] {
    std::vector<unsigned char> got(s.recv_elems * es);
    peerlink::device::copy_sync(got.data(), impl.recv, got.size());
    return data.wrong(s, seed, got.data());
  };
  try {
    auto in = data.input(s, seed);
    peerlink::device::copy_sync(impl.send, in.data(), in.size());
    std::vector<unsigned char> garbage(s.recv_elems * es, 0xA5);
    peerlink::device::copy_sync(impl.recv, garbage.data(), garbage.size());
    impl.run(s.piece, stream);
    sync();
    if (c.check) row.wrong += check();
    for (int i = 0; i < c.warmup; ++i) impl.run(s.piece, stream);
    sync();
    peerlink::device::Graph graph = nullptr;
    if (c.graph) {
      peerlink::device::begin_capture(stream);
      try {
        for (int i = 0; i < c.iters; ++i) impl.run(s.piece, stream);
      } catch (...) {
        try { peerlink::device::end_capture(stream); } catch (...) {}
        throw;
      }
      graph = peerlink::device::end_capture(stream);
      peerlink::device::graph_launch(graph, stream);  // upload, untimed
      sync();
    }
    peerlink::device::Event e0 = nullptr, e1 = nullptr;
    if (stream) e0 = peerlink::device::timing_event_create(), e1 = peerlink::device::timing_event_create();
    comm.barrier();
    auto t0 = Clock::now();
    if (e0) peerlink::device::event_record(e0, stream);
    if (graph) peerlink::device::graph_launch(graph, stream);
    else for (int i = 0; i < c.iters; ++i) impl.run(s.piece, stream);
    if (e1) peerlink::device::event_record(e1, stream);
    sync();
    double us = e0 ? 1e3 * peerlink::device::elapsed_ms(e0, e1) : std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (e0) peerlink::device::event_destroy(e0), peerlink::device::event_destroy(e1);
    if (graph) peerlink::device::graph_destroy(graph);
    row.time_us = us / c.iters;
    if (c.check) row.wrong += check();
    row.ok = true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s %s failed: %s\n", comm.rank(), impl.name, kCollNames[int(c.op)], e.what());
  }
  return row;
}

// measure() between the implementation's begin / end hooks (collective: every rank calls them for
// the same sizes, so a failure is reported in the row, and the ranks stay in step).
Row measure_size(const Config& c, Impl& impl, const Data& data, const Shape& s, uint64_t seed, void* stream,
                 peerlink::Communicator& comm) {
  const size_t es = data.es();
  try {
    if (impl.begin) impl.begin(s.send_elems * es, s.recv_elems * es);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s %s: setup failed: %s\n", comm.rank(), impl.name, kCollNames[int(c.op)], e.what());
    try {
      if (impl.end) impl.end();  // what did register
    } catch (...) {
    }
    return Row{};
  }
  Row row = measure(c, impl, data, s, seed, stream, comm);
  try {
    if (impl.end) impl.end();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s %s: teardown failed: %s\n", comm.rank(), impl.name, kCollNames[int(c.op)], e.what());
    row.ok = false;
  }
  return row;
}

// The peerlink-reg column: peerlink's own buffers (p's), registered as two windows around each
// size. Its availability line says whether such windows are zero-copy capable (a trial
// registration of both buffers whole).
void set_pl_registered(const Config& c, peerlink::Communicator& comm, const Impl& p, Impl& reg, size_t max_bytes) {
  reg.name = "peerlink-reg";
  if (!c.pl_register) {
    reg.why = "--pl-register 0";
    return;
  }
  reg.available = true;
  reg.send = p.send;
  reg.recv = p.recv;
  reg.run = p.run;  // same calls on the same buffers: only the registration differs
  reg.after_sync = p.after_sync;
  auto ids = std::make_shared<std::vector<uint64_t>>();
  reg.begin = [&comm, ids, send = p.send, recv = p.recv](size_t sb, size_t rb) {
    ids->push_back(peerlink::register_window(comm, send, sb ? sb : 1));
    ids->push_back(peerlink::register_window(comm, recv, rb ? rb : 1));
  };
  reg.end = [&comm, ids] {  // every window released even when one deregistration throws
    std::vector<uint64_t> mine;
    mine.swap(*ids);
    std::exception_ptr first;
    for (uint64_t id : mine) {
      try {
        peerlink::deregister_window(comm, id);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  };
  try {
    reg.begin(max_bytes, max_bytes);
    const bool zc = peerlink::window_zero_copy(comm, p.recv, max_bytes);
    reg.end();
    const bool pull = c.op == Coll::Reduce || c.op == Coll::ReduceScatter;
    reg.note = !zc ? "NOT zero-copy capable: runs as peerlink"
               : pull ? "zero-copy capable; the pull's auto threshold is the library's (README, windows)"
                      : "zero-copy capable; auto from " + std::to_string(comm.options().coll_zero_copy_min) +
                            "-byte pieces (PEERLINK_COLL_ZERO_COPY_MIN)";
  } catch (const std::exception& e) {
    try {
      reg.end();
    } catch (...) {
    }
    reg.available = false;
    reg.why = std::string("register_window: ") + e.what();
  }
}

int run_rank(const Config& c, const std::string& uid, int rank, const std::vector<int>& devs) {
  const int n = static_cast<int>(devs.size()), dev = devs[rank];
  void* stream = nullptr;
  if (dev >= 0) {
    peerlink::device::set_current(dev);
    stream = peerlink::device::stream_create();
  }
  Config cfg = c;
  if (dev < 0) cfg.graph = 0;
  peerlink::Communicator comm(uid, rank, n, dev);
  const size_t es = bench::dt_size(c.dt);
  auto sizes = bench::size_sweep(c.min_bytes, c.max_bytes, c.factor);
  const size_t max_bytes = std::max<size_t>(sizes.back() / es * es, es * n) + 64;
  Impl impls[kImpls];  // peerlink, peerlink-reg, nccl, nccl-reg
  impls[0].name = "peerlink";
  impls[0].available = true;
  impls[0].send = comm.alloc(max_bytes);
  impls[0].recv = comm.alloc(max_bytes);
  {
    Impl& p = impls[0];
    const peerlink::DataType t = to_pl(c.dt);
    const peerlink::ReduceOp o = to_pl(c.redop);
    p.run = [&comm, &p, t, o, op = c.op, root = c.root](size_t cnt, void* st) {
      switch (op) {
        case Coll::AllGather: peerlink::all_gather(comm, p.send, p.recv, cnt, t, st); break;
        case Coll::ReduceScatter: peerlink::reduce_scatter(comm, p.send, p.recv, cnt, t, o, st); break;
        case Coll::Broadcast: peerlink::broadcast(comm, p.send, p.recv, cnt, t, root, st); break;
        case Coll::Reduce: peerlink::reduce(comm, p.send, p.recv, cnt, t, o, root, st); break;
        case Coll::AllToAll: peerlink::all_to_all(comm, p.send, p.recv, cnt, t, st); break;
      }
    };
    p.after_sync = [&comm] { peerlink::allreduce_check(comm); };
  }
  set_pl_registered(c, comm, impls[0], impls[1], max_bytes);
  if (!c.pl_plain) {  // its buffers stay: the registered column (and NCCL) use them
    impls[0].available = false;
    impls[0].why = "--pl-plain 0";
  }
  std::unique_ptr<NcclSide> nccl;
  if (g_nccl) {
    nccl = std::make_unique<NcclSide>(c, comm, devs, impls[0].send, impls[0].recv, max_bytes, impls[2], impls[3]);
  } else {
    impls[2].name = "nccl";
    impls[3].name = "nccl-reg";
    impls[2].why = impls[3].why = "--nccl 0";
  }
  Reporter rep(c, comm, impls);
  Data data(c, rank, n);
  // Untimed calls of each implementation before the sweep (common/warmup.h).
  for (Impl& im : impls)
    if (im.available) {
      if (im.begin) im.begin(max_bytes, max_bytes);
      bench::prewarm(cfg.warmup, {sizes.back() / es / n * n, sizes.front() / es / n * n},
                     [&](size_t elems) { im.run(shape_of(c.op, elems, n).piece, stream); },
                     [&] {
                       if (stream) peerlink::device::stream_sync(stream);
                       if (im.after_sync) im.after_sync();
                     });
      if (im.end) im.end();
    }
  for (size_t bytes : sizes) {
    size_t elems = bytes / es / n * n;  // a multiple of n elements, as nccl-tests
    if (elems == 0) continue;
    Shape s = shape_of(c.op, elems, n);
    Row rows[kImpls];
    for (int k = 0; k < kImpls; ++k)
      if (impls[k].available) rows[k] = measure_size(cfg, impls[k], data, s, bytes * 2654435761u + 1, stream, comm);
    rep.add(elems * es, elems, rows);
  }
  comm.barrier();
  if (nccl) nccl->close();
  comm.free(impls[0].send);
  comm.free(impls[0].recv);
  if (stream) peerlink::device::stream_destroy(stream);
  return rep.finish();
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_main("bench_collectives", kUsage, argc, argv, parse, [](const Config& c) {
    bench::nccl::disable_nvls();
    std::vector<int> devs = bench::rank_devices(c.nranks, c.gpus);
    if (c.root >= static_cast<int>(devs.size())) throw bench::UsageError("-r " + std::to_string(c.root) + " is not a rank");
    std::string uid = bench::make_unique_id("co");
    auto body = [&](int r) { return run_rank(c, uid, r, devs); };
    if (c.threads) {
      if (g_nccl && bench::devices_repeat(devs)) {
        std::printf("# --threads with two ranks on one device: no NCCL columns (NCCL refuses that)\n");
        g_nccl = false;
      }
      return bench::thread_ranks(static_cast<int>(devs.size()), body, std::chrono::seconds(c.time_limit_s));
    }
    return bench::fork_ranks(static_cast<int>(devs.size()), body, std::chrono::seconds(c.time_limit_s));
  });
}
