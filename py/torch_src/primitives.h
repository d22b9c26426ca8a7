// The calls a process group method is made of: one peerlink call each (or a group of
// point-to-point calls), on contiguous tensors, enqueued on a launch's stream (host backend: run
// before returning). Torch ops they need (casts, copies, scratch tensors) run on the current
// stream, which the caller sets to the launch's.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "device_comm.h"
#include "dtype_route.h"

namespace peerlink::pt {

// out = op over ranks of in; out may be in.
void allreduce_into(const Launch& l, const at::Tensor& in, const at::Tensor& out, const ReducePlan& p);
// root's out = op over ranks of in (out is written on root only).
void reduce_into(const Launch& l, const at::Tensor& in, const at::Tensor& out, const ReducePlan& p, int root);
// out (n elements) = op over ranks of in[rank * n, +n) (in holds world * n).
void reduce_scatter_into(const Launch& l, const at::Tensor& in, const at::Tensor& out, const ReducePlan& p);

// out (world * in's bytes) = every rank's in, in rank order. In place: in is out's chunk of this rank.
void all_gather_into(const Launch& l, const at::Tensor& in, const at::Tensor& out);
// t = root's t on every rank.
void broadcast_into(const Launch& l, const at::Tensor& t, int root);
// Rows (dim 0) of in go to the ranks by in_splits, rows of out come from them by out_splits; empty
// splits: equal parts. in and out may be the same tensor.
void all_to_all_into(const Launch& l, const at::Tensor& in, const at::Tensor& out, const std::vector<int64_t>& out_splits,
                     const std::vector<int64_t>& in_splits);

// Point-to-point calls issued as one group (any pattern of sends and receives among the ranks
// completes; this rank as a peer is a local copy). Byte counts: any dtype.
struct P2PItem {
  bool send = false;
  int peer = 0;
  void* ptr = nullptr;
  size_t bytes = 0;
};
void p2p_group(const Launch& l, const std::vector<P2PItem>& items);
P2PItem p2p_send(int peer, const at::Tensor& t);
P2PItem p2p_recv(int peer, const at::Tensor& t);

}  // namespace peerlink::pt
