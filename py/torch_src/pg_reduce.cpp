// The reducing methods of ProcessGroupPeerlink.
#include <ATen/ATen.h>

#include "pg_checks.h"
#include "process_group.h"

namespace peerlink::pt {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

WorkPtr ProcessGroupPeerlink::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  at::Tensor t = single_tensor(tensors, "allreduce");
  ReducePlan p = plan_reduction(t.scalar_type(), opts.reduceOp, "allreduce");
  return run("allreduce", OpType::ALLREDUCE, t.device(), opts.asyncOp, {t}, {t}, [t, p](const Launch& l) {
    Writable w(t);
    allreduce_into(l, w.c, w.c, p);
    w.done();
  });
}

WorkPtr ProcessGroupPeerlink::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "peerlink allreduce_coalesced: no tensors");
  std::vector<ReducePlan> plans;
  for (const at::Tensor& t : tensors) {
    check_like(tensors[0], t, "allreduce_coalesced", false);
    plans.push_back(plan_reduction(t.scalar_type(), opts.reduceOp, "allreduce_coalesced"));
  }
  return run("allreduce_coalesced", OpType::ALLREDUCE_COALESCED, tensors[0].device(), opts.asyncOp, tensors, tensors,
             [tensors, plans](const Launch& l) {
               for (size_t i = 0; i < tensors.size(); ++i) {
                 Writable w(tensors[i]);
                 allreduce_into(l, w.c, w.c, plans[i]);
                 w.done();
               }
             });
}

WorkPtr ProcessGroupPeerlink::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  at::Tensor t = single_tensor(tensors, "reduce");
  const int root = check_rank(opts.rootRank, getSize(), "reduce", "root");
  ReducePlan p = plan_reduction(t.scalar_type(), opts.reduceOp, "reduce");
  const bool is_root = root == getRank();
  return run("reduce", OpType::REDUCE, t.device(), opts.asyncOp, {t}, {t}, [t, p, root, is_root](const Launch& l) {
    Writable w(t);
    reduce_into(l, w.c, w.c, p, root);
    if (is_root) w.done();
  });
}

namespace {

// Reduce-scatter of per-rank inputs of the output's size: one flat input, one call.
void reduce_scatter_even(const Launch& l, const std::vector<at::Tensor>& ins, const at::Tensor& out, const ReducePlan& p) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor& x : ins) flat.push_back(x.reshape({-1}));
  at::Tensor all = at::cat(flat);
  Writable w(out);
  reduce_scatter_into(l, all, w.c, p);
  w.done();
}

// Inputs of other sizes than this rank's output (each rank's part has its own size): one reduce
// per rank, to that rank (ProcessGroupNCCL runs such calls the same way).
void reduce_scatter_uneven(const Launch& l, const std::vector<at::Tensor>& ins, const at::Tensor& out,
                           const ReducePlan& p, int rank) {
  for (int q = 0; q < static_cast<int>(ins.size()); ++q) {
    at::Tensor in = ins[q].contiguous();
    if (q == rank) {
      Writable w(out);
      reduce_into(l, in, w.c, p, q);
      w.done();
    } else {
      reduce_into(l, in, in, p, q);  // written on rank q only
    }
  }
}

}  // namespace

WorkPtr ProcessGroupPeerlink::reduce_scatter(std::vector<at::Tensor>& outputs,
                                             std::vector<std::vector<at::Tensor>>& inputs,
                                             const c10d::ReduceScatterOptions& opts) {
  at::Tensor out = single_tensor(outputs, "reduce_scatter");
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                    "peerlink reduce_scatter: expects one list of ", getSize(), " input tensors");
  const std::vector<at::Tensor> ins = inputs[0];
  bool even = true;
  for (const at::Tensor& x : ins) {
    check_like(out, x, "reduce_scatter");
    even = even && x.numel() == out.numel();
  }
  TORCH_CHECK_VALUE(ins[getRank()].numel() == out.numel(), "peerlink reduce_scatter: this rank's input has ",
                    ins[getRank()].numel(), " elements, the output ", out.numel());
  ReducePlan p = plan_reduction(out.scalar_type(), opts.reduceOp, "reduce_scatter");
  const int rank = getRank();
  std::vector<at::Tensor> keep = ins;
  return run("reduce_scatter", OpType::REDUCE_SCATTER, out.device(), opts.asyncOp, {out}, keep,
             [ins, out, p, even, rank](const Launch& l) {
               if (even) reduce_scatter_even(l, ins, out, p);
               else reduce_scatter_uneven(l, ins, out, p, rank);
             });
}

WorkPtr ProcessGroupPeerlink::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                   const c10d::ReduceScatterOptions& opts) {
  check_tensor(output, "reduce_scatter_tensor");
  check_like(output, input, "reduce_scatter_tensor");
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(), "peerlink reduce_scatter_tensor: input has ",
                    input.numel(), " elements, expected ", getSize(), " x ", output.numel());
  ReducePlan p = plan_reduction(output.scalar_type(), opts.reduceOp, "reduce_scatter_tensor");
  at::Tensor in = input, out = output;
  return run("reduce_scatter_tensor", OpType::_REDUCE_SCATTER_BASE, out.device(), opts.asyncOp, {out}, {in},
             [in, out, p](const Launch& l) {
               Writable w(out);
               reduce_scatter_into(l, in.contiguous(), w.c, p);
               w.done();
             });
}

WorkPtr ProcessGroupPeerlink::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(!outputs.empty() && outputs.size() == inputs.size(), "peerlink reduce_scatter_tensor_coalesced: ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs");
  std::vector<ReducePlan> plans;
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_like(outputs[0], outputs[i], "reduce_scatter_tensor_coalesced", false);
    check_like(outputs[i], inputs[i], "reduce_scatter_tensor_coalesced");
    TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * getSize(), "peerlink reduce_scatter_tensor_coalesced: input ",
                      i, " has ", inputs[i].numel(), " elements, expected ", getSize(), " x ", outputs[i].numel());
    plans.push_back(plan_reduction(outputs[i].scalar_type(), opts.reduceOp, "reduce_scatter_tensor_coalesced"));
  }
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return run("reduce_scatter_tensor_coalesced", OpType::COALESCED, outs[0].device(), opts.asyncOp, outs, ins,
             [ins, outs, plans](const Launch& l) {
               for (size_t i = 0; i < outs.size(); ++i) {
                 Writable w(outs[i]);
                 reduce_scatter_into(l, ins[i].contiguous(), w.c, plans[i]);
                 w.done();
               }
             });
}

}  // namespace peerlink::pt
