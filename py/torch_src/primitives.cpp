#include "primitives.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <numeric>

#include "peerlink/collectives.h"

namespace peerlink::pt {

namespace {

size_t addr(const at::Tensor& t) { return reinterpret_cast<size_t>(t.data_ptr()); }
size_t nbytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }
char* bytes_at(const at::Tensor& t, size_t off) { return static_cast<char*>(t.data_ptr()) + off; }

}  // namespace

void allreduce_into(const Launch& l, const at::Tensor& in, const at::Tensor& out, const ReducePlan& p) {
  at::Tensor win = to_wire(in, p);
  // Convert: reduce the converted copy in place, then cast it back into out.
  at::Tensor wout = p.form == ReducePlan::Form::Convert ? win : wire_output(out, p);
  if (wire_count(win) == 0) return;
  l.dc->comm().allreduce(win.data_ptr(), wout.data_ptr(), wire_count(win), p.dtype, p.op, l.raw);
  l.dc->used_collectives();
  at::Tensor o = out;
  finish_wire(wout, o, p);
}

void reduce_into(const Launch& l, const at::Tensor& in, const at::Tensor& out, const ReducePlan& p, int root) {
  at::Tensor win = to_wire(in, p);
  at::Tensor wout = p.form == ReducePlan::Form::Convert ? win : wire_output(out, p);
  if (wire_count(win) == 0) return;
  l.dc->comm().reduce(win.data_ptr(), wout.data_ptr(), wire_count(win), p.dtype, p.op, root, l.raw);
  l.dc->used_collectives();
  at::Tensor o = out;
  if (l.dc->comm().rank() == root) finish_wire(wout, o, p);
}

void reduce_scatter_into(const Launch& l, const at::Tensor& in, const at::Tensor& out, const ReducePlan& p) {
  at::Tensor win = to_wire(in, p);
  at::Tensor wout = wire_output(out, p);
  if (wire_count(wout) == 0) return;
  l.dc->comm().reduce_scatter(win.data_ptr(), wout.data_ptr(), wire_count(wout), p.dtype, p.op, l.raw);
  l.dc->used_collectives();
  at::Tensor o = out;
  finish_wire(wout, o, p);
}

void all_gather_into(const Launch& l, const at::Tensor& in, const at::Tensor& out) {
  GroupComm& c = l.dc->comm();
  const size_t sb = nbytes(in);
  TORCH_CHECK_VALUE(nbytes(out) == sb * static_cast<size_t>(c.size()), "peerlink all_gather: output has ",
                    nbytes(out), " bytes, expected ", c.size(), " x ", sb);
  if (sb == 0) return;
  if (auto bt = byte_type({sb, addr(in), addr(out)})) {
    c.all_gather(in.data_ptr(), out.data_ptr(), sb / dtype_size(*bt), *bt, l.raw);
    l.dc->used_collectives();
    return;
  }
  std::vector<P2PItem> items;
  for (int q = 0; q < c.size(); ++q) {
    char* chunk = bytes_at(out, size_t(q) * sb);
    if (q == c.rank()) {
      if (chunk != in.data_ptr()) items.push_back({true, q, in.data_ptr(), sb}), items.push_back({false, q, chunk, sb});
      continue;
    }
    items.push_back({true, q, in.data_ptr(), sb});
    items.push_back({false, q, chunk, sb});
  }
  p2p_group(l, items);
}

void broadcast_into(const Launch& l, const at::Tensor& t, int root) {
  GroupComm& c = l.dc->comm();
  const size_t b = nbytes(t);
  if (b == 0) return;
  if (auto bt = byte_type({b, addr(t)})) {
    c.broadcast(t.data_ptr(), b / dtype_size(*bt), *bt, root, l.raw);
    l.dc->used_collectives();
    return;
  }
  std::vector<P2PItem> items;
  if (c.rank() == root) {
    for (int q = 0; q < c.size(); ++q)
      if (q != root) items.push_back({true, q, t.data_ptr(), b});
  } else {
    items.push_back({false, root, t.data_ptr(), b});
  }
  p2p_group(l, items);
}

namespace {

// Byte counts and offsets of the parts of a dim-0 split of t (empty splits: world equal parts).
void split_bytes(const at::Tensor& t, const std::vector<int64_t>& splits, int world, const char* side,
                 std::vector<size_t>& counts, std::vector<size_t>& displs) {
  const size_t total = nbytes(t);
  counts.assign(world, 0);
  displs.assign(world, 0);
  if (splits.empty()) {
    TORCH_CHECK_VALUE(total % world == 0, "peerlink all_to_all: ", side, " of ", total,
                      " bytes does not split into ", world, " equal parts");
    for (int q = 0; q < world; ++q) counts[q] = total / world, displs[q] = q * (total / world);
    return;
  }
  TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == world, "peerlink all_to_all: ", side, " splits have ",
                    splits.size(), " entries for ", world, " ranks");
  const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  const size_t row_bytes = rows > 0 ? total / rows : 0;
  int64_t sum = 0;
  for (int q = 0; q < world; ++q) {
    TORCH_CHECK_VALUE(splits[q] >= 0, "peerlink all_to_all: negative ", side, " split ", splits[q]);
    displs[q] = static_cast<size_t>(sum) * row_bytes;
    counts[q] = static_cast<size_t>(splits[q]) * row_bytes;
    sum += splits[q];
  }
  TORCH_CHECK_VALUE(sum == rows, "peerlink all_to_all: ", side, " splits sum to ", sum, ", the tensor has ", rows,
                    " rows");
}

}  // namespace

void all_to_all_into(const Launch& l, const at::Tensor& in_arg, const at::Tensor& out,
                     const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits) {
  GroupComm& c = l.dc->comm();
  const int world = c.size();
  std::vector<size_t> sc, sd, rc, rd;
  split_bytes(in_arg, in_splits, world, "input", sc, sd);
  split_bytes(out, out_splits, world, "output", rc, rd);
  const bool equal = in_splits.empty() && out_splits.empty();
  if (equal) TORCH_CHECK_VALUE(nbytes(in_arg) == nbytes(out), "peerlink all_to_all: input has ", nbytes(in_arg),
                               " bytes, output ", nbytes(out));
  if (nbytes(in_arg) == 0 && nbytes(out) == 0) return;
  // peerlink's all_to_all_v wants separate extents: an in-place uneven call reads a copy.
  const bool same = in_arg.data_ptr() == out.data_ptr();
  at::Tensor in = (same && !equal) ? in_arg.clone() : in_arg;
  size_t acc = addr(in) | addr(out);
  for (int q = 0; q < world; ++q) acc |= sc[q] | sd[q] | rc[q] | rd[q];
  if (auto bt = byte_type({acc})) {
    const size_t e = dtype_size(*bt);
    if (equal) {
      c.all_to_all(in.data_ptr(), out.data_ptr(), sc[0] / e, *bt, l.raw);
    } else {
      for (int q = 0; q < world; ++q) sc[q] /= e, sd[q] /= e, rc[q] /= e, rd[q] /= e;
      c.all_to_all_v(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(), rd.data(), *bt, l.raw);
    }
    l.dc->used_collectives();
    return;
  }
  at::Tensor src = (same && equal) ? in_arg.clone() : in;  // a group's sends and receives must not overlap either
  std::vector<P2PItem> items;
  for (int q = 0; q < world; ++q) {
    items.push_back({true, q, bytes_at(src, sd[q]), sc[q]});
    items.push_back({false, q, bytes_at(out, rd[q]), rc[q]});
  }
  p2p_group(l, items);
}

P2PItem p2p_send(int peer, const at::Tensor& t) { return {true, peer, t.data_ptr(), nbytes(t)}; }
P2PItem p2p_recv(int peer, const at::Tensor& t) { return {false, peer, t.data_ptr(), nbytes(t)}; }

void p2p_group(const Launch& l, const std::vector<P2PItem>& items) {
  GroupComm& c = l.dc->comm();
  const int me = c.rank();
  // A send to this rank is matched with this rank's receive of the group, in order: as a local
  // copy here (the library requires equal lengths; a zero-length pair is skipped on both sides).
  std::vector<const P2PItem*> self_send, self_recv, remote;
  for (const P2PItem& it : items) {
    if (it.bytes == 0) continue;
    if (it.peer == me) (it.send ? self_send : self_recv).push_back(&it);
    else remote.push_back(&it);
  }
  TORCH_CHECK_VALUE(self_send.size() == self_recv.size(), "peerlink: ", self_send.size(),
                    " sends to this rank against ", self_recv.size(), " receives from it");
  for (size_t i = 0; i < self_send.size(); ++i) {
    TORCH_CHECK_VALUE(self_send[i]->bytes == self_recv[i]->bytes, "peerlink: a send of ", self_send[i]->bytes,
                      " bytes to this rank against a receive of ", self_recv[i]->bytes);
    const at::Tensor dst = at::from_blob(self_recv[i]->ptr, {int64_t(self_recv[i]->bytes)}, at::TensorOptions()
                                             .dtype(at::kByte).device(l.dc->device()));
    const at::Tensor src = at::from_blob(self_send[i]->ptr, {int64_t(self_send[i]->bytes)}, at::TensorOptions()
                                             .dtype(at::kByte).device(l.dc->device()));
    dst.copy_(src);
  }
  if (remote.empty()) return;
  if (remote.size() == 1) {
    const P2PItem& it = *remote[0];
    it.send ? c.send(it.peer, it.ptr, it.bytes, l.raw) : c.recv(it.peer, it.ptr, it.bytes, l.raw);
  } else {
    c.group_start();
    try {
      for (const P2PItem* it : remote) it->send ? c.send(it->peer, it->ptr, it->bytes, l.raw)
                                                : c.recv(it->peer, it->ptr, it->bytes, l.raw);
    } catch (...) {
      try { c.group_end(); } catch (...) {}  // ends the group; the peers then see the error or a timeout
      throw;
    }
    c.group_end();
  }
  l.dc->used_p2p();
}

}  // namespace peerlink::pt
