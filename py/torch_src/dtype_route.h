// How torch's dtypes travel through peerlink, whose collectives know f32, f16, bf16, f64, i32 and i64.
//
// Moves that do not look at the values (all_gather, broadcast, all_to_all, gather, scatter, send,
// recv) carry any dtype as bytes. Reductions run natively on those six types; every other dtype
// that has a correct route takes it (listed at plan_reduction), and the rest is a TypeError naming
// the dtype and the op, never a wrong result.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>

#include "peerlink/collectives.h"

namespace peerlink::pt {

// peerlink's type of a torch dtype where the two are the same numbers; nullopt otherwise.
std::optional<DataType> native_type(at::ScalarType t);

// The element type of a move of bytes whose counts and addresses are `values`: the widest of I64,
// I32 and F16 whose size divides every value (the moving collectives copy such elements bit for bit).
// nullopt when only single bytes do: the caller then moves them with point-to-point calls, which
// take byte counts.
std::optional<DataType> byte_type(std::initializer_list<size_t> values);
size_t byte_type_size(std::optional<DataType> t);  // 1 for nullopt

// How one reduction travels.
struct ReducePlan {
  enum class Form {
    Direct,         // the tensor's own type is peerlink's
    Reinterpret,    // same bits, another type of that width: unsigned sum / product (modular)
    ComplexAsReal,  // sum / avg of complex numbers as pairs of reals
    Convert,        // through a wider type and back: one rounding (fp8) or an exact result (small ints, bool)
  };
  Form form = Form::Direct;
  DataType dtype = DataType::F32;          // peerlink's type of the travelling data
  ReduceOp op = ReduceOp::Sum;             // peerlink's op on it
  at::ScalarType wire = at::ScalarType::Float;  // torch's type of the travelling data
  // PREMUL_SUM: every rank's input is multiplied by this factor (a double or a one-element tensor)
  // before the sum, as NCCL's ncclRedOpCreatePreMulSum.
  bool premul = false;
  double premul_factor = 1.0;
  at::Tensor premul_tensor;
};

// `what` names the call in errors ("allreduce", ...).
ReducePlan plan_reduction(at::ScalarType t, const c10d::ReduceOp& op, const char* what);
// The functional collectives' names: "sum", "avg", "product", "min", "max" (and "prod", "mean").
ReducePlan plan_reduction(at::ScalarType t, const std::string& op, const char* what);

// The travelling form of `t` (contiguous): a view of it (Direct, Reinterpret, ComplexAsReal,
// without a premul factor) or a new tensor (Convert, or a premul factor applied). Runs torch ops on
// the current stream.
at::Tensor to_wire(const at::Tensor& t, const ReducePlan& p);
// A tensor the reduction can write for output `out` (contiguous): a view of it, or a new tensor of
// the wire type for Convert (then finish_wire copies it back).
at::Tensor wire_output(const at::Tensor& out, const ReducePlan& p);
void finish_wire(const at::Tensor& wire, at::Tensor& out, const ReducePlan& p);
// Elements of peerlink's type in `wire`.
size_t wire_count(const at::Tensor& wire);

}  // namespace peerlink::pt
