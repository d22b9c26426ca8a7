// torch.ops.peerlink: collectives as torch custom ops, so that torch.compile traces through them
// (their fake implementations are in peerlink/torch/_fake.py) and CUDA graphs capture them. The
// group is named as torch names it (ProcessGroup.group_name, what functional collectives take);
// the group's backend for the tensors' device must be peerlink. Every op runs synchronously on the
// current stream, like a sync c10d call, and allocates its outputs there.
#include <ATen/ATen.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/library.h>

#include "ops.h"
#include "pg_checks.h"

namespace peerlink::pt {

c10::intrusive_ptr<ProcessGroupPeerlink> backend_of(const std::string& group_name, const at::Device& device,
                                                    const char* what) {
  c10::intrusive_ptr<c10d::ProcessGroup> pg = c10d::resolve_process_group(group_name);
  c10::intrusive_ptr<c10d::Backend> b = pg->getBackend(device.type());
  auto* p = dynamic_cast<ProcessGroupPeerlink*>(b.get());
  TORCH_CHECK_VALUE(p != nullptr, "peerlink ", what, ": group '", group_name, "' runs ", device.type(),
                    " tensors on its backend '", b->getBackendName(), "', not on peerlink");
  return c10::intrusive_ptr<ProcessGroupPeerlink>::reclaim_copy(p);
}

namespace {

void check_group_size(const ProcessGroupPeerlink& pg, int64_t group_size, const char* what) {
  TORCH_CHECK_VALUE(group_size == pg.getSize(), "peerlink ", what, ": group_size ", group_size, " but the group has ",
                    pg.getSize(), " ranks");
}

std::vector<int64_t> dim0_scaled(const at::Tensor& t, int64_t mul, int64_t div, const char* what) {
  TORCH_CHECK_VALUE(t.dim() >= 1, "peerlink ", what, ": a 0-dim tensor (needs a first dimension)");
  std::vector<int64_t> s = t.sizes().vec();
  TORCH_CHECK_VALUE(s[0] * mul % div == 0, "peerlink ", what, ": first dimension ", s[0], " does not divide by ", div);
  s[0] = s[0] * mul / div;
  return s;
}

at::Tensor all_reduce(const at::Tensor& input, c10::string_view op, c10::string_view group_name) {
  check_tensor(input, "all_reduce");
  auto pg = backend_of(std::string(group_name), input.device(), "all_reduce");
  ReducePlan p = plan_reduction(input.scalar_type(), std::string(op), "all_reduce");
  at::Tensor out = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  pg->run_sync("all_reduce", input.device(), [&](const Launch& l) { allreduce_into(l, input.contiguous(), out, p); });
  return out;
}

at::Tensor& all_reduce_(at::Tensor& input, c10::string_view op, c10::string_view group_name) {
  check_tensor(input, "all_reduce_");
  auto pg = backend_of(std::string(group_name), input.device(), "all_reduce_");
  ReducePlan p = plan_reduction(input.scalar_type(), std::string(op), "all_reduce_");
  pg->run_sync("all_reduce_", input.device(), [&](const Launch& l) {
    Writable w(input);
    allreduce_into(l, w.c, w.c, p);
    w.done();
  });
  return input;
}

at::Tensor all_gather_into_tensor(const at::Tensor& input, int64_t group_size, c10::string_view group_name) {
  check_tensor(input, "all_gather_into_tensor");
  auto pg = backend_of(std::string(group_name), input.device(), "all_gather_into_tensor");
  check_group_size(*pg, group_size, "all_gather_into_tensor");
  at::Tensor out = at::empty(dim0_scaled(input, group_size, 1, "all_gather_into_tensor"), input.options());
  pg->run_sync("all_gather_into_tensor", input.device(), [&](const Launch& l) { all_gather_into(l, input.contiguous(), out); });
  return out;
}

at::Tensor reduce_scatter_tensor(const at::Tensor& input, c10::string_view op, int64_t group_size, c10::string_view group_name) {
  check_tensor(input, "reduce_scatter_tensor");
  auto pg = backend_of(std::string(group_name), input.device(), "reduce_scatter_tensor");
  check_group_size(*pg, group_size, "reduce_scatter_tensor");
  ReducePlan p = plan_reduction(input.scalar_type(), std::string(op), "reduce_scatter_tensor");
  at::Tensor out = at::empty(dim0_scaled(input, 1, group_size, "reduce_scatter_tensor"), input.options());
  pg->run_sync("reduce_scatter_tensor", input.device(),
               [&](const Launch& l) { reduce_scatter_into(l, input.contiguous(), out, p); });
  return out;
}

at::Tensor all_to_all_single(const at::Tensor& input, c10::SymIntArrayRef output_split_sizes,
                             c10::SymIntArrayRef input_split_sizes, c10::string_view group_name) {
  check_tensor(input, "all_to_all_single");
  auto pg = backend_of(std::string(group_name), input.device(), "all_to_all_single");
  std::vector<int64_t> out_splits, in_splits;
  for (const c10::SymInt& s : output_split_sizes) out_splits.push_back(s.expect_int());
  for (const c10::SymInt& s : input_split_sizes) in_splits.push_back(s.expect_int());
  std::vector<int64_t> shape = dim0_scaled(input, 1, 1, "all_to_all_single");
  if (!out_splits.empty()) {
    shape[0] = 0;
    for (int64_t s : out_splits) shape[0] += s;
  }
  at::Tensor out = at::empty(shape, input.options());
  pg->run_sync("all_to_all_single", input.device(),
               [&](const Launch& l) { all_to_all_into(l, input.contiguous(), out, out_splits, in_splits); });
  return out;
}

// all_reduce_ returns its (mutated) input: torch's functionalization cannot handle such a custom op
// by itself (AOTAutograd, torch.compile), so it gets this kernel: the functional all_reduce on the
// unwrapped value, whose result then replaces the input, as functionalization does for aten's
// in-place ops.
at::Tensor& all_reduce__functionalize(at::Tensor& input, c10::string_view op, c10::string_view group_name) {
  static auto functional = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("peerlink::all_reduce", "")
                               .typed<at::Tensor(const at::Tensor&, c10::string_view, c10::string_view)>();
  namespace fz = at::functionalization::impl;
  if (!fz::isFunctionalTensor(input)) {
    at::AutoDispatchSkipFunctionalize guard;
    return all_reduce_(input, op, group_name);
  }
  fz::sync(input);
  at::Tensor value = fz::from_functional_tensor(input);
  at::Tensor out;
  {
    at::AutoDispatchSkipFunctionalize guard;
    out = functional.call(value, op, group_name);
  }
  fz::replace_(input, out);
  fz::commit_update(input);
  fz::sync(input);
  return input;
}

}  // namespace
}  // namespace peerlink::pt

TORCH_LIBRARY(peerlink, m) {
  // Fake implementations (torch.compile) live in Python; torch imports this module for them.
  m.set_python_module("peerlink.torch._fake");
  m.def("all_reduce(Tensor input, str op, str group_name) -> Tensor");
  m.def("all_reduce_(Tensor(a!) input, str op, str group_name) -> Tensor(a!)");
  m.def("all_gather_into_tensor(Tensor input, int group_size, str group_name) -> Tensor");
  m.def("reduce_scatter_tensor(Tensor input, str op, int group_size, str group_name) -> Tensor");
  m.def("all_to_all_single(Tensor input, SymInt[] output_split_sizes, SymInt[] input_split_sizes, str group_name) "
        "-> Tensor");
  peerlink::pt::define_fused_ops(m);
}

// One kernel for both devices: the group's backend for the device decides (CPU tensors run on
// the host backend, for groups created with cpu:peerlink).
#define PEERLINK_OPS_IMPL(KEY)                                                        \
  TORCH_LIBRARY_IMPL(peerlink, KEY, m) {                                              \
    m.impl("all_reduce", &peerlink::pt::all_reduce);                                  \
    m.impl("all_reduce_", &peerlink::pt::all_reduce_);                                \
    m.impl("all_gather_into_tensor", &peerlink::pt::all_gather_into_tensor);          \
    m.impl("reduce_scatter_tensor", &peerlink::pt::reduce_scatter_tensor);            \
    m.impl("all_to_all_single", &peerlink::pt::all_to_all_single);                    \
    peerlink::pt::impl_fused_ops(m);                                                  \
  }
PEERLINK_OPS_IMPL(CUDA)
PEERLINK_OPS_IMPL(CPU)

TORCH_LIBRARY_IMPL(peerlink, Functionalize, m) { m.impl("all_reduce_", &peerlink::pt::all_reduce__functionalize); }
