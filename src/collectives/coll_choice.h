// The path of one collective call (all_gather, reduce_scatter, broadcast, reduce, all_to_all(v)):
// forced by Options, or chosen by size and world size from measured crossovers (coll_choice.cpp).
// Every input of the choice is the same on every rank, so the ranks choose alike without talking.
#pragma once
#include <cstddef>

#include "collectives/coll_plan.h"
#include "peerlink/collectives.h"  // DataType, ReduceOp
#include "peerlink/options.h"      // CollAlgo

namespace peerlink::coll {

struct CollState;
struct Window;

// One call, its arguments checked (collectives.cpp).
struct CollCall {
  const char* name = "";
  CollDesc d;
  DataType dtype = DataType::F32;
  ReduceOp op = ReduceOp::Sum;
  const void* src = nullptr;
  void* dst = nullptr;
};

// Whether the kind has a zero-copy path (coll_zero_copy.cpp): every kind but all_to_all_v.
bool zc_kind(int kind);
// The buffer whose window the zero-copy path uses, and its bytes on this rank (*bytes): recvbuf
// for the moving kinds, sendbuf for the reducing ones.
const void* zc_buffer(const CollDesc& d, const void* src, const void* dst, size_t* bytes);
// `w`, or a window of its own for `buf` when Options::coll_graph_register asks for one here.
const Window* graph_window_for(CollState& st, const CollCall& c, const void* buf, size_t bytes, const Window* w,
                               void* stream);
// The path: ZeroCopy (needs `w`), LL, LL128, CopyEngine, TwoHop or Push. Throws InvalidArgument
// when Options force a path this call cannot take, naming the option and the sizes.
CollAlgo choose_algo(const CollState& st, const CollCall& c, const Window* w);

}  // namespace peerlink::coll
