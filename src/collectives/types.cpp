// Names, sizes and string parsing of the collective enums (Python bindings and benchmarks parse
// user strings with these).
#include <cctype>
#include <string>

#include "collectives/reduce_ops.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/collectives.h"
#include "peerlink/errors.h"

namespace peerlink {
namespace {
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

// The device/host code indexes types and ops by these numbers.
static_assert(int(DataType::F32) == coll::kF32 && int(DataType::F16) == coll::kF16 &&
                  int(DataType::BF16) == coll::kBF16 && int(DataType::F64) == coll::kF64 &&
                  int(DataType::I32) == coll::kI32 && int(DataType::I64) == coll::kI64,
              "DataType codes");
static_assert(int(ReduceOp::Sum) == coll::kOpSum && int(ReduceOp::Max) == coll::kOpMax &&
                  int(ReduceOp::Min) == coll::kOpMin && int(ReduceOp::Prod) == coll::kOpProd &&
                  int(ReduceOp::Avg) == coll::kOpAvg,
              "ReduceOp codes");

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::F32: return 4;
    case DataType::F16: return 2;
    case DataType::BF16: return 2;
    case DataType::F64: return 8;
    case DataType::I32: return 4;
    case DataType::I64: return 8;
  }
  throw InvalidArgument(common::format("dtype_size: unknown DataType {}", static_cast<int>(t)));
}

const char* to_string(DataType t) {
  switch (t) {
    case DataType::F32: return "f32";
    case DataType::F16: return "f16";
    case DataType::BF16: return "bf16";
    case DataType::F64: return "f64";
    case DataType::I32: return "i32";
    case DataType::I64: return "i64";
  }
  return "?";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Avg: return "avg";
  }
  return "?";
}

DataType parse_dtype(const std::string& s) {
  std::string v = lower(s);
  if (v == "f32" || v == "float32" || v == "float" || v == "fp32") return DataType::F32;
  if (v == "f16" || v == "float16" || v == "half" || v == "fp16") return DataType::F16;
  if (v == "bf16" || v == "bfloat16") return DataType::BF16;
  if (v == "f64" || v == "float64" || v == "double" || v == "fp64") return DataType::F64;
  if (v == "i32" || v == "int32" || v == "int") return DataType::I32;
  if (v == "i64" || v == "int64" || v == "long") return DataType::I64;
  throw InvalidArgument(common::format("unknown dtype '{}' (use f32, f16, bf16, f64, i32, i64)", s));
}

ReduceOp parse_reduce_op(const std::string& s) {
  std::string v = lower(s);
  if (v == "sum") return ReduceOp::Sum;
  if (v == "max") return ReduceOp::Max;
  if (v == "min") return ReduceOp::Min;
  if (v == "prod" || v == "product") return ReduceOp::Prod;
  if (v == "avg" || v == "mean") return ReduceOp::Avg;
  throw InvalidArgument(common::format("unknown reduce op '{}' (use sum, max, min, prod, avg)", s));
}

}  // namespace peerlink
