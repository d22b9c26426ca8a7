// Cases of the non-allreduce collectives for the host and GPU tests: per-rank random inputs (never
// zero, from allreduce_harness.h), exact byte checks for the moving collectives, the float64 /
// exact-integer reference for the reducing ones, guard bytes after every output, and a
// bitwise comparison of reduce_scatter / reduce results with allreduce's on the same inputs.
// Buffers are plain host memory here; `Mem` lets the GPU test substitute device memory.
#pragma once
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "allreduce_harness.h"
#include "peerlink/peerlink.h"

namespace pltest::coll {

enum class Kind { AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, AllToAllV };
inline const char* kind_name(Kind k) {
  const char* names[] = {"all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "all_to_all_v"};
  return names[int(k)];
}
inline bool is_reducing(Kind k) { return k == Kind::ReduceScatter || k == Kind::Reduce; }

// Rank r's values for "piece" q (the part of r's input that rank q gets, or the whole input).
inline std::vector<unsigned char> values(size_t count, uint64_t seed, int r, DataType t, ReduceOp op) {
  std::vector<unsigned char> v(count * peerlink::dtype_size(t) + 1);
  fill_input(v.data(), count, seed, r, t, op);
  v.resize(count * peerlink::dtype_size(t));
  return v;
}

// all_to_all_v count from rank i to rank j for a case (0 allowed).
inline size_t a2av_count(uint64_t seed, int i, int j, size_t maxc) { return mix(seed * 31 + i * 8 + j) % (maxc + 1); }

// Device hooks: copy in/out of the communicator's memory. Host: plain memcpy, buffers from new[].
struct Mem {
  std::function<void*(size_t)> alloc = [](size_t n) { return static_cast<void*>(new unsigned char[n ? n : 1]); };
  std::function<void(void*)> release = [](void* p) { delete[] static_cast<unsigned char*>(p); };
  std::function<void(void*, const void*, size_t)> put = [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); };
  std::function<void(void*, const void*, size_t)> get = [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); };
  std::function<void()> sync = [] {};
  void* stream = nullptr;
};

struct Buf {
  Mem& m;
  size_t n;
  void* p;
  Buf(Mem& mem, size_t bytes, unsigned char fill) : m(mem), n(bytes + 16), p(mem.alloc(bytes + 16)) {
    std::vector<unsigned char> f(n, fill);
    m.put(p, f.data(), n);
  }
  ~Buf() { m.release(p); }
  std::vector<unsigned char> read() const {
    std::vector<unsigned char> v(n);
    m.get(v.data(), p, n);
    return v;
  }
  char* at(size_t off) const { return static_cast<char*>(p) + off; }
};

// Runs one case on `comm` and checks it; returns the output's hash (identical on every rank for
// all_gather and broadcast), 1 when the rank has no output.
inline uint64_t run_case(peerlink::Communicator& comm, Mem& mem, Kind k, DataType t, ReduceOp op, size_t count,
                         int root, bool in_place, uint64_t seed, const std::string& what) {
  const int n = comm.world_size(), me = comm.rank();
  const size_t es = peerlink::dtype_size(t);
  const ReduceOp gop = is_reducing(k) ? op : ReduceOp::Sum;
  auto cmp = [&](const std::vector<unsigned char>& got, size_t off, const std::vector<unsigned char>& want,
                 const std::string& part) {
    MP_CHECK_MSG(std::memcmp(got.data() + off, want.data(), want.size()) == 0,
                 what << ": " << part << " differs from the sender's bytes");
  };
  auto guard = [&](const std::vector<unsigned char>& got, size_t from) {
    for (size_t i = from; i < got.size(); ++i)
      MP_CHECK_MSG(got[i] == 0xEE, what << ": byte " << i << " past the output was written");
  };
  switch (k) {
    case Kind::AllGather: {
      Buf recv(mem, n * count * es, 0xEE);
      auto mine = values(count, seed, me, t, gop);
      Buf send(mem, count * es, 0x11);
      const void* s = send.p;
      if (in_place) {
        mem.put(recv.at(me * count * es), mine.data(), mine.size());
        s = recv.at(me * count * es);
      } else {
        mem.put(send.p, mine.data(), mine.size());
      }
      peerlink::all_gather(comm, s, recv.p, count, t, mem.stream);
      mem.sync();
      auto got = recv.read();
      for (int r = 0; r < n; ++r) cmp(got, r * count * es, values(count, seed, r, t, gop), "block of rank " + std::to_string(r));
      guard(got, n * count * es);
      return fnv1a(got.data(), n * count * es) | 1;
    }
    case Kind::AllToAll: {
      Buf send(mem, n * count * es, 0x11), recv(mem, n * count * es, 0xEE);
      for (int q = 0; q < n; ++q) {
        auto v = values(count, seed + q, me, t, gop);
        mem.put(send.at(q * count * es), v.data(), v.size());
      }
      if (in_place) {  // the input in recvbuf itself
        auto all = send.read();
        mem.put(recv.p, all.data(), n * count * es);
      }
      peerlink::all_to_all(comm, in_place ? recv.p : send.p, recv.p, count, t, mem.stream);
      mem.sync();
      auto got = recv.read();
      for (int r = 0; r < n; ++r) cmp(got, r * count * es, values(count, seed + me, r, t, gop), "block from rank " + std::to_string(r));
      guard(got, n * count * es);
      return 1;
    }
    case Kind::AllToAllV: {
      // Pieces laid out with a one-element gap after each, in reverse rank order on the receive side.
      std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
      size_t so = 0, ro = 0;
      for (int q = 0; q < n; ++q) {
        sc[q] = a2av_count(seed, me, q, count);
        sd[q] = so;
        so += sc[q] + 1;
      }
      for (int q = n - 1; q >= 0; --q) {
        rc[q] = a2av_count(seed, q, me, count);
        rd[q] = ro;
        ro += rc[q] + 1;
      }
      Buf send(mem, so * es, 0x11), recv(mem, ro * es, 0xEE);
      for (int q = 0; q < n; ++q) {
        auto v = values(sc[q], seed + q, me, t, gop);
        mem.put(send.at(sd[q] * es), v.data(), v.size());
      }
      peerlink::all_to_all_v(comm, send.p, sc.data(), sd.data(), recv.p, rc.data(), rd.data(), t, mem.stream);
      mem.sync();
      auto got = recv.read();
      for (int q = 0; q < n; ++q) {
        cmp(got, rd[q] * es, values(rc[q], seed + me, q, t, gop), "piece from rank " + std::to_string(q));
        for (size_t b = 0; b < es; ++b) MP_CHECK_MSG(got[(rd[q] + rc[q]) * es + b] == 0xEE, what << ": gap written");
      }
      guard(got, ro * es);
      return 1;
    }
    case Kind::Broadcast: {
      Buf recv(mem, count * es, 0xEE), send(mem, count * es, 0x11);
      auto want = values(count, seed, root, t, gop);
      const void* s = nullptr;  // non-roots: sendbuf unused (null allowed)
      if (me == root) {
        mem.put(in_place ? recv.p : send.p, want.data(), want.size());
        s = in_place ? recv.p : send.p;
      }
      peerlink::broadcast(comm, s, recv.p, count, t, root, mem.stream);
      mem.sync();
      auto got = recv.read();
      cmp(got, 0, want, "output");
      guard(got, count * es);
      return fnv1a(got.data(), count * es) | 1;
    }
    case Kind::ReduceScatter:
    case Kind::Reduce: {
      const bool rs = k == Kind::ReduceScatter;
      const size_t total = rs ? n * count : count;
      // Shard q of rank r = values(count, seed + q, r): a per-shard reference (check_result).
      std::vector<unsigned char> input(total * es);
      for (int q = 0; q < (rs ? n : 1); ++q) {
        auto v = values(count, seed + q, me, t, op);
        std::memcpy(input.data() + q * count * es, v.data(), v.size());
      }
      Buf send(mem, total * es, 0x11), out(mem, count * es, 0xEE);
      // Bitwise reference: allreduce of the same input (same rank order and accumulation).
      Buf ar(mem, total * es, 0x22);
      mem.put(ar.p, input.data(), input.size());
      peerlink::allreduce(comm, ar.p, ar.p, total, t, op, mem.stream);
      void* dst = out.p;
      const void* s = send.p;
      if (in_place) {  // sendbuf holds the input and the output aliases our part of it
        mem.put(send.p, input.data(), input.size());
        dst = send.at(rs ? me * count * es : 0);
      } else {
        mem.put(send.p, input.data(), input.size());
      }
      bool has_out = rs || me == root;
      if (rs) peerlink::reduce_scatter(comm, s, dst, count, t, op, mem.stream);
      else peerlink::reduce(comm, s, has_out ? dst : (in_place ? dst : nullptr), count, t, op, root, mem.stream);
      mem.sync();
      if (!has_out) return 1;
      std::vector<unsigned char> got;
      if (in_place) {
        auto all = send.read();
        got.assign(all.begin() + (rs ? me * count * es : 0), all.begin() + (rs ? me * count * es : 0) + count * es);
      } else {
        got = out.read();
        guard(got, count * es);
        got.resize(count * es);
      }
      check_result(got.data(), count, seed + (rs ? me : 0), n, t, op, what);
      auto ref = ar.read();
      MP_CHECK_MSG(std::memcmp(got.data(), ref.data() + (rs ? me * count * es : 0), count * es) == 0,
                   what << ": bits differ from allreduce's on the same input");
      return 1;
    }
  }
  return 1;
}

}  // namespace pltest::coll
