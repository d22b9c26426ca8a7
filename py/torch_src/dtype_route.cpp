#include "dtype_route.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace peerlink::pt {

using at::ScalarType;
using Form = ReducePlan::Form;

std::optional<DataType> native_type(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return DataType::F32;
    case ScalarType::Half: return DataType::F16;
    case ScalarType::BFloat16: return DataType::BF16;
    case ScalarType::Double: return DataType::F64;
    case ScalarType::Int: return DataType::I32;
    case ScalarType::Long: return DataType::I64;
    default: return std::nullopt;
  }
}

std::optional<DataType> byte_type(std::initializer_list<size_t> values) {
  size_t acc = 0;
  for (size_t v : values) acc |= v;
  if (acc % 8 == 0) return DataType::I64;
  if (acc % 4 == 0) return DataType::I32;
  if (acc % 2 == 0) return DataType::F16;
  return std::nullopt;
}

size_t byte_type_size(std::optional<DataType> t) { return t ? dtype_size(*t) : 1; }

namespace {

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "SUM";
    case ReduceOp::Avg: return "AVG";
    case ReduceOp::Prod: return "PRODUCT";
    case ReduceOp::Min: return "MIN";
    case ReduceOp::Max: return "MAX";
  }
  return "?";
}

[[noreturn]] void unsupported(const char* what, ScalarType t, const char* op) {
  C10_THROW_ERROR(TypeError, c10::str("peerlink ", what, ": ReduceOp.", op, " on ", t,
                                      " tensors is not supported (gloo or nccl may run it)"));
}

ReducePlan with(Form f, DataType d, ReduceOp op, ScalarType wire) {
  ReducePlan p;
  p.form = f;
  p.dtype = d;
  p.op = op;
  p.wire = wire;
  return p;
}

bool is_fp8(ScalarType t) {
  return t == ScalarType::Float8_e4m3fn || t == ScalarType::Float8_e5m2 || t == ScalarType::Float8_e4m3fnuz ||
         t == ScalarType::Float8_e5m2fnuz;
}

// The route of dtype t under op (premul already folded into Sum by the callers).
ReducePlan route(ScalarType t, ReduceOp op, bool premul, const char* what) {
  const char* name = premul ? "PREMUL_SUM" : op_name(op);
  if (auto d = native_type(t)) {
    if (premul && !at::isFloatingType(t)) unsupported(what, t, name);
    return with(Form::Direct, *d, op, t);
  }
  if (at::isComplexType(t)) {  // componentwise only for sum and mean, as torch's complex rule says
    if (op != ReduceOp::Sum && op != ReduceOp::Avg) unsupported(what, t, name);
    ScalarType real = c10::toRealValueType(t);
    auto d = native_type(real);
    if (!d) unsupported(what, t, name);
    return with(Form::ComplexAsReal, *d, op, real);
  }
  if (is_fp8(t))  // fp32 math, one rounding back
    return with(Form::Convert, DataType::F32, op, ScalarType::Float);
  if (premul) unsupported(what, t, name);
  switch (t) {
    case ScalarType::Bool:  // or (sum, max) and and (product, min), as ProcessGroupNCCL maps them
      if (op == ReduceOp::Avg) unsupported(what, t, name);
      return with(Form::Convert, DataType::I32, (op == ReduceOp::Sum || op == ReduceOp::Max) ? ReduceOp::Max : ReduceOp::Min,
                  ScalarType::Int);
    case ScalarType::Char:
    case ScalarType::Byte:
    case ScalarType::Short:
    case ScalarType::UInt16:
      // Exact in i32 (at most 8 ranks); the cast back wraps a sum or product modulo 2^bits, as the
      // type's own arithmetic would; avg is the exact mean rounded toward zero.
      return with(Form::Convert, DataType::I32, op, ScalarType::Int);
    case ScalarType::UInt32:
      if (op == ReduceOp::Sum || op == ReduceOp::Prod) return with(Form::Reinterpret, DataType::I32, op, ScalarType::Int);
      return with(Form::Convert, DataType::I64, op, ScalarType::Long);
    case ScalarType::UInt64:
      if (op == ReduceOp::Sum || op == ReduceOp::Prod) return with(Form::Reinterpret, DataType::I64, op, ScalarType::Long);
      unsupported(what, t, name);
    default: unsupported(what, t, name);
  }
}

}  // namespace

ReducePlan plan_reduction(ScalarType t, const c10d::ReduceOp& op, const char* what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return route(t, ReduceOp::Sum, false, what);
    case c10d::ReduceOp::AVG: return route(t, ReduceOp::Avg, false, what);
    case c10d::ReduceOp::PRODUCT: return route(t, ReduceOp::Prod, false, what);
    case c10d::ReduceOp::MIN: return route(t, ReduceOp::Min, false, what);
    case c10d::ReduceOp::MAX: return route(t, ReduceOp::Max, false, what);
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK_VALUE(s != nullptr, "peerlink ", what, ": ReduceOp.PREMUL_SUM without its factor");
      ReducePlan p = route(t, ReduceOp::Sum, true, what);
      p.premul = true;
      p.premul_factor = s->double_factor;
      p.premul_tensor = s->tensor_factor;
      return p;
    }
    default:
      C10_THROW_ERROR(NotImplementedError,
                      c10::str("peerlink ", what, ": reduce op ", static_cast<int>(op.op_),
                               " (BAND, BOR, BXOR) is not supported; peerlink runs SUM, AVG, PRODUCT, MIN, MAX and "
                               "PREMUL_SUM"));
  }
}

ReducePlan plan_reduction(ScalarType t, const std::string& op, const char* what) {
  if (op == "sum") return route(t, ReduceOp::Sum, false, what);
  if (op == "avg" || op == "mean") return route(t, ReduceOp::Avg, false, what);
  if (op == "product" || op == "prod") return route(t, ReduceOp::Prod, false, what);
  if (op == "min") return route(t, ReduceOp::Min, false, what);
  if (op == "max") return route(t, ReduceOp::Max, false, what);
  C10_THROW_ERROR(ValueError, c10::str("peerlink ", what, ": reduce op '", op,
                                       "' is not one of sum, avg, product, min, max"));
}

at::Tensor to_wire(const at::Tensor& t, const ReducePlan& p) {
  at::Tensor w = t;
  if (p.premul && p.form != Form::Convert) {  // the factor in the tensor's own type, as NCCL's premul
    w = p.premul_tensor.defined() ? t * p.premul_tensor.to(t.device()) : t * p.premul_factor;
  }
  switch (p.form) {
    case Form::Direct: return w;
    case Form::Reinterpret: return w.view(p.wire);
    case Form::ComplexAsReal: return at::view_as_real(w);
    case Form::Convert: {
      at::Tensor c = w.to(p.wire);
      if (p.premul) c = p.premul_tensor.defined() ? c * p.premul_tensor.to(c.device(), p.wire) : c * p.premul_factor;
      return c;
    }
  }
  return w;
}

at::Tensor wire_output(const at::Tensor& out, const ReducePlan& p) {
  switch (p.form) {
    case Form::Direct: return out;
    case Form::Reinterpret: return out.view(p.wire);
    case Form::ComplexAsReal: return at::view_as_real(out);
    case Form::Convert: return at::empty(out.sizes(), out.options().dtype(p.wire));
  }
  return out;
}

void finish_wire(const at::Tensor& wire, at::Tensor& out, const ReducePlan& p) {
  if (p.form == Form::Convert) out.copy_(wire);
}

size_t wire_count(const at::Tensor& wire) { return static_cast<size_t>(wire.numel()); }

}  // namespace peerlink::pt
