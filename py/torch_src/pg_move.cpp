// The methods of ProcessGroupPeerlink that move values without reducing them: any dtype, as bytes.
#include <ATen/ATen.h>

#include "pg_checks.h"
#include "process_group.h"

namespace peerlink::pt {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

namespace {

// outs[q] = rank q's in. Equal sizes: one all_gather into a flat buffer; otherwise (each rank's
// part has its own size) a group of sends and receives.
void gather_list(const Launch& l, const at::Tensor& in_arg, const std::vector<at::Tensor>& outs) {
  at::Tensor in = in_arg.contiguous();
  bool even = true;
  for (const at::Tensor& o : outs) even = even && o.numel() == in.numel();
  if (even) {
    at::Tensor flat = at::empty({static_cast<int64_t>(outs.size()) * in.numel()}, in.options());
    all_gather_into(l, in, flat);
    for (size_t q = 0; q < outs.size(); ++q) outs[q].copy_(flat.narrow(0, q * in.numel(), in.numel()).view(outs[q].sizes()));
    return;
  }
  std::vector<Writable> dense;
  dense.reserve(outs.size());
  std::vector<P2PItem> items;
  for (size_t q = 0; q < outs.size(); ++q) {
    dense.emplace_back(outs[q]);
    items.push_back(p2p_send(static_cast<int>(q), in));
    items.push_back(p2p_recv(static_cast<int>(q), dense.back().c));
  }
  p2p_group(l, items);
  for (const Writable& w : dense) w.done();
}

}  // namespace

WorkPtr ProcessGroupPeerlink::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  at::Tensor t = single_tensor(tensors, "broadcast");
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "peerlink broadcast: root tensor ", opts.rootTensor, " (one tensor per rank)");
  const int root = check_rank(opts.rootRank, getSize(), "broadcast", "root");
  return run("broadcast", OpType::BROADCAST, t.device(), opts.asyncOp, {t}, {t}, [t, root](const Launch& l) {
    Writable w(t);
    broadcast_into(l, w.c, root);
    w.done();
  });
}

WorkPtr ProcessGroupPeerlink::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::AllgatherOptions& opts) {
  at::Tensor in = single_tensor(inputs, "allgather");
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                    "peerlink allgather: expects one list of ", getSize(), " output tensors");
  std::vector<at::Tensor> outs = outputs[0];
  for (const at::Tensor& o : outs) check_like(in, o, "allgather");
  TORCH_CHECK_VALUE(outs[getRank()].numel() == in.numel(), "peerlink allgather: this rank's output has ",
                    outs[getRank()].numel(), " elements, the input ", in.numel());
  return run("allgather", OpType::ALLGATHER, in.device(), opts.asyncOp, outs, {in},
             [in, outs](const Launch& l) { gather_list(l, in, outs); });
}

WorkPtr ProcessGroupPeerlink::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(!inputs.empty() && outputs.size() == inputs.size(), "peerlink allgather_coalesced: ",
                    outputs.size(), " output lists for ", inputs.size(), " inputs");
  std::vector<at::Tensor> all_outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_like(inputs[0], inputs[i], "allgather_coalesced", false);
    TORCH_CHECK_VALUE(static_cast<int>(outputs[i].size()) == getSize(), "peerlink allgather_coalesced: output list ", i,
                      " has ", outputs[i].size(), " tensors for ", getSize(), " ranks");
    for (const at::Tensor& o : outputs[i]) check_like(inputs[i], o, "allgather_coalesced"), all_outs.push_back(o);
  }
  std::vector<at::Tensor> ins = inputs;
  std::vector<std::vector<at::Tensor>> outs = outputs;
  return run("allgather_coalesced", OpType::ALLGATHER_COALESCED, ins[0].device(), opts.asyncOp, all_outs, ins,
             [ins, outs](const Launch& l) {
               for (size_t i = 0; i < ins.size(); ++i) gather_list(l, ins[i], outs[i]);
             });
}

WorkPtr ProcessGroupPeerlink::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  check_tensor(output, "all_gather_into_tensor");
  check_like(output, input, "all_gather_into_tensor");
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), "peerlink all_gather_into_tensor: output has ",
                    output.numel(), " elements, expected ", getSize(), " x ", input.numel());
  at::Tensor in = input, out = output;
  return run("all_gather_into_tensor", OpType::_ALLGATHER_BASE, out.device(), opts.asyncOp, {out}, {in},
             [in, out](const Launch& l) {
               Writable w(out);
               all_gather_into(l, in.contiguous(), w.c);
               w.done();
             });
}

WorkPtr ProcessGroupPeerlink::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(!outputs.empty() && outputs.size() == inputs.size(), "peerlink allgather_into_tensor_coalesced: ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_like(outputs[0], outputs[i], "allgather_into_tensor_coalesced", false);
    check_like(outputs[i], inputs[i], "allgather_into_tensor_coalesced");
    TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * getSize(), "peerlink allgather_into_tensor_coalesced: "
                      "output ", i, " has ", outputs[i].numel(), " elements, expected ", getSize(), " x ", inputs[i].numel());
  }
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return run("allgather_into_tensor_coalesced", OpType::COALESCED, outs[0].device(), opts.asyncOp, outs, ins,
             [ins, outs](const Launch& l) {
               for (size_t i = 0; i < outs.size(); ++i) {
                 Writable w(outs[i]);
                 all_gather_into(l, ins[i].contiguous(), w.c);
                 w.done();
               }
             });
}

WorkPtr ProcessGroupPeerlink::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                     const c10d::GatherOptions& opts) {
  at::Tensor in = single_tensor(inputs, "gather");
  const int root = check_rank(opts.rootRank, getSize(), "gather", "root");
  const int rank = getRank();
  std::vector<at::Tensor> outs;
  if (rank == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                      "peerlink gather: the root expects one list of ", getSize(), " output tensors");
    outs = outputs[0];
    for (const at::Tensor& o : outs) check_like(in, o, "gather");
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                      "peerlink gather: only the root passes output tensors");
  }
  return run("gather", OpType::GATHER, in.device(), opts.asyncOp, outs, {in}, [in, outs, root, rank](const Launch& l) {
    at::Tensor src = in.contiguous();
    if (rank != root) {
      p2p_group(l, {p2p_send(root, src)});
      return;
    }
    std::vector<Writable> dense;
    dense.reserve(outs.size());
    std::vector<P2PItem> items{p2p_send(root, src)};
    for (size_t q = 0; q < outs.size(); ++q) {
      dense.emplace_back(outs[q]);
      items.push_back(p2p_recv(static_cast<int>(q), dense.back().c));
    }
    p2p_group(l, items);
    for (const Writable& w : dense) w.done();
  });
}

WorkPtr ProcessGroupPeerlink::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                      const c10d::ScatterOptions& opts) {
  at::Tensor out = single_tensor(outputs, "scatter");
  const int root = check_rank(opts.rootRank, getSize(), "scatter", "root");
  std::vector<at::Tensor> ins;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                      "peerlink scatter: the root expects one list of ", getSize(), " input tensors");
    ins = inputs[0];
    for (const at::Tensor& x : ins) check_like(out, x, "scatter");
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                      "peerlink scatter: only the root passes input tensors");
  }
  return run("scatter", OpType::SCATTER, out.device(), opts.asyncOp, {out}, ins, [ins, out, root](const Launch& l) {
    Writable w(out);
    std::vector<at::Tensor> dense;
    std::vector<P2PItem> items;
    for (size_t q = 0; q < ins.size(); ++q) {
      dense.push_back(ins[q].contiguous());
      items.push_back(p2p_send(static_cast<int>(q), dense.back()));
    }
    items.push_back(p2p_recv(root, w.c));
    p2p_group(l, items);
    w.done();
  });
}

WorkPtr ProcessGroupPeerlink::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                            std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  check_tensor(output, "all_to_all_single");
  check_like(output, input, "all_to_all_single");
  at::Tensor in = input, out = output;
  std::vector<int64_t> os = output_splits, is = input_splits;
  return run("all_to_all_single", OpType::ALLTOALL_BASE, out.device(), opts.asyncOp, {out}, {in},
             [in, out, os, is](const Launch& l) {
               Writable w(out);
               // In place stays in place (the same contiguous tensor), else the input read as is.
               at::Tensor src = in.is_same(out) ? w.c : in.contiguous();
               all_to_all_into(l, src, w.c, os, is);
               w.done();
             });
}

WorkPtr ProcessGroupPeerlink::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                       const c10d::AllToAllOptions& opts) {
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == getSize() && static_cast<int>(inputs.size()) == getSize(),
                    "peerlink all_to_all: expects ", getSize(), " outputs and inputs, got ", outputs.size(), " and ",
                    inputs.size());
  for (size_t q = 0; q < outputs.size(); ++q) {
    check_like(outputs[0], outputs[q], "all_to_all");
    check_like(outputs[0], inputs[q], "all_to_all");
  }
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return run("all_to_all", OpType::ALLTOALL, outs[0].device(), opts.asyncOp, outs, ins, [ins, outs](const Launch& l) {
    std::vector<Writable> dense;
    dense.reserve(outs.size());
    std::vector<at::Tensor> srcs;
    std::vector<P2PItem> items;
    for (size_t q = 0; q < outs.size(); ++q) {
      srcs.push_back(ins[q].contiguous());
      dense.emplace_back(outs[q]);
      items.push_back(p2p_send(static_cast<int>(q), srcs.back()));
      items.push_back(p2p_recv(static_cast<int>(q), dense.back().c));
    }
    p2p_group(l, items);
    for (const Writable& w : dense) w.done();
  });
}

}  // namespace peerlink::pt
