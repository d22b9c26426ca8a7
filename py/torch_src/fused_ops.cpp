// torch.ops.peerlink's fused tensor-parallel epilogue: allreduce + residual add + RMSNorm (+ FP8
// quantization) in one pass (peerlink/fused.h), in the shapes inference engines call:
//   fused_allreduce_add_rms_norm             in place: input <- norm, residual <- new residual (vLLM)
//   fused_allreduce_add_rms_norm_functional  returns (norm, new residual) (SGLang)
//   fused_allreduce_add_rms_norm_fp8         out <- e4m3(norm / scale), residual <- new residual
// Rows are the last dimension (hidden = weight's elements); synchronous on the current stream,
// graph-capturable, as the other ops. Fake implementations: peerlink/torch/_fake.py.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>

#include "ops.h"
#include "peerlink/fused.h"
#include "pg_checks.h"

namespace peerlink::pt {

namespace {

// A contiguous, 16-byte aligned tensor with t's values (t itself when it already is; the fused
// kernels load 16-byte vectors), and the copy back into t for outputs.
struct Aligned {
  at::Tensor t, c;
  explicit Aligned(const at::Tensor& x) : t(x) {
    c = x.contiguous();
    if (reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 != 0) c = c.clone();
  }
  void done() const {
    if (!c.is_same(t)) t.copy_(c);
  }
};

struct Rows {
  size_t tokens = 0, hidden = 0;
  DataType dtype = DataType::F32;
};

// The fused kernels run within one node: a group spanning nodes has no single communicator for them.
Communicator& node_comm(const Launch& l, const char* what) {
  Communicator* c = l.dc->comm().single_node();
  TORCH_CHECK_NOT_IMPLEMENTED(c, "peerlink ", what, ": the fused epilogue runs on groups within one node; this group "
                              "spans nodes (use all_reduce, then the residual add and RMSNorm)");
  return *c;
}

Rows check_rows(const at::Tensor& input, const at::Tensor& residual, const at::Tensor& weight, const char* what) {
  check_tensor(input, what);
  check_like(input, residual, what);
  check_like(input, weight, what);
  auto dt = native_type(input.scalar_type());
  TORCH_CHECK_TYPE(dt && (*dt == DataType::BF16 || *dt == DataType::F16 || *dt == DataType::F32), "peerlink ", what,
                   ": ", input.scalar_type(), " tensors (bfloat16, float16 or float32)");
  TORCH_CHECK_VALUE(input.dim() >= 1 && weight.numel() == input.size(-1), "peerlink ", what, ": weight has ",
                    weight.numel(), " elements, the rows of input ", input.dim() ? input.size(-1) : 0);
  TORCH_CHECK_VALUE(residual.numel() == input.numel(), "peerlink ", what, ": residual has ", residual.numel(),
                    " elements, input ", input.numel());
  Rows r;
  r.hidden = static_cast<size_t>(weight.numel());
  r.tokens = r.hidden ? static_cast<size_t>(input.numel()) / r.hidden : 0;
  r.dtype = *dt;
  return r;
}

void fused_allreduce_add_rms_norm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps,
                                  c10::string_view group_name, double weight_bias) {
  const char* what = "fused_allreduce_add_rms_norm";
  Rows r = check_rows(input, residual, weight, what);
  auto pg = backend_of(std::string(group_name), input.device(), what);
  pg->run_sync(what, input.device(), [&](const Launch& l) {
    Aligned in(input), res(residual), w(weight);
    peerlink::allreduce_add_rmsnorm(node_comm(l, what), in.c.data_ptr(), res.c.data_ptr(), w.c.data_ptr(), in.c.data_ptr(),
                                    res.c.data_ptr(), r.tokens, r.hidden, r.dtype, static_cast<float>(eps),
                                    static_cast<float>(weight_bias), l.raw);
    l.dc->used_collectives();
    in.done();
    res.done();
  });
}

std::tuple<at::Tensor, at::Tensor> fused_allreduce_add_rms_norm_functional(const at::Tensor& input,
                                                                           const at::Tensor& residual,
                                                                           const at::Tensor& weight, double eps,
                                                                           c10::string_view group_name,
                                                                           double weight_bias) {
  const char* what = "fused_allreduce_add_rms_norm_functional";
  Rows r = check_rows(input, residual, weight, what);
  auto pg = backend_of(std::string(group_name), input.device(), what);
  at::Tensor norm = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  at::Tensor res_out = at::empty(residual.sizes(), residual.options().memory_format(at::MemoryFormat::Contiguous));
  pg->run_sync(what, input.device(), [&](const Launch& l) {
    Aligned in(input), res(residual), w(weight);
    peerlink::allreduce_add_rmsnorm(node_comm(l, what), in.c.data_ptr(), res.c.data_ptr(), w.c.data_ptr(), norm.data_ptr(),
                                    res_out.data_ptr(), r.tokens, r.hidden, r.dtype, static_cast<float>(eps),
                                    static_cast<float>(weight_bias), l.raw);
    l.dc->used_collectives();
  });
  return {norm, res_out};
}

void fused_allreduce_add_rms_norm_fp8(at::Tensor& out, const at::Tensor& input, at::Tensor& residual,
                                      const at::Tensor& weight, const at::Tensor& scale, double eps,
                                      c10::string_view group_name, double weight_bias) {
  const char* what = "fused_allreduce_add_rms_norm_fp8";
  Rows r = check_rows(input, residual, weight, what);
  check_like(input, out, what, false);
  check_like(input, scale, what, false);
  TORCH_CHECK_TYPE(out.scalar_type() == at::kFloat8_e4m3fn || out.scalar_type() == at::kByte, "peerlink ", what,
                   ": out is ", out.scalar_type(), " (float8_e4m3fn or uint8)");
  TORCH_CHECK_VALUE(out.numel() == input.numel(), "peerlink ", what, ": out has ", out.numel(), " elements, input ",
                    input.numel());
  TORCH_CHECK_TYPE(scale.scalar_type() == at::kFloat && scale.numel() == 1, "peerlink ", what,
                   ": scale must be one float32, got ", scale.numel(), " of ", scale.scalar_type());
  auto pg = backend_of(std::string(group_name), input.device(), what);
  pg->run_sync(what, input.device(), [&](const Launch& l) {
    Aligned in(input), res(residual), w(weight), q(out), s(scale);
    peerlink::allreduce_add_rmsnorm_fp8(node_comm(l, what), in.c.data_ptr(), res.c.data_ptr(), w.c.data_ptr(),
                                        /*norm_out=*/nullptr, res.c.data_ptr(), q.c.data_ptr(),
                                        static_cast<const float*>(s.c.data_ptr()), r.tokens, r.hidden, r.dtype,
                                        static_cast<float>(eps), static_cast<float>(weight_bias), l.raw);
    l.dc->used_collectives();
    res.done();
    q.done();
  });
}

}  // namespace

void define_fused_ops(torch::Library& m) {
  m.def("fused_allreduce_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps, "
        "str group_name, float weight_bias=0.) -> ()");
  m.def("fused_allreduce_add_rms_norm_functional(Tensor input, Tensor residual, Tensor weight, float eps, "
        "str group_name, float weight_bias=0.) -> (Tensor, Tensor)");
  m.def("fused_allreduce_add_rms_norm_fp8(Tensor(a!) out, Tensor input, Tensor(b!) residual, Tensor weight, "
        "Tensor scale, float eps, str group_name, float weight_bias=0.) -> ()");
}

void impl_fused_ops(torch::Library& m) {
  m.impl("fused_allreduce_add_rms_norm", &fused_allreduce_add_rms_norm);
  m.impl("fused_allreduce_add_rms_norm_functional", &fused_allreduce_add_rms_norm_functional);
  m.impl("fused_allreduce_add_rms_norm_fp8", &fused_allreduce_add_rms_norm_fp8);
}

}  // namespace peerlink::pt
