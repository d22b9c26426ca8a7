// The benchmarks' element types and reduction operators (allreduce_data.h) as peerlink's.
#pragma once
#include "allreduce_data.h"
#include "peerlink/collectives.h"

namespace bench {

inline peerlink::DataType to_pl(Dt t) {
  using D = peerlink::DataType;
  static const D m[] = {D::F32, D::F16, D::BF16, D::F64, D::I32, D::I64};
  return m[static_cast<int>(t)];
}
inline peerlink::ReduceOp to_pl(Op o) {
  using R = peerlink::ReduceOp;
  static const R m[] = {R::Sum, R::Prod, R::Max, R::Min, R::Avg};
  return m[static_cast<int>(o)];
}

}  // namespace bench
