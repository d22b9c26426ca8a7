#include "pg_checks.h"

#include <c10/util/Exception.h>

namespace peerlink::pt {

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK_VALUE(t.defined(), "peerlink ", what, ": undefined tensor");
  TORCH_CHECK_TYPE(t.layout() == at::kStrided, "peerlink ", what, ": ", t.layout(),
                   " tensors are not supported (dense tensors only)");
  TORCH_CHECK_VALUE(t.is_cuda() || t.is_cpu(), "peerlink ", what, ": a tensor on ", t.device(),
                    " (peerlink runs CUDA and CPU tensors)");
}

at::Tensor single_tensor(const std::vector<at::Tensor>& v, const char* what) {
  TORCH_CHECK_VALUE(v.size() == 1, "peerlink ", what, ": expects one tensor per rank, got ", v.size());
  check_tensor(v[0], what);
  return v[0];
}

void check_like(const at::Tensor& a, const at::Tensor& b, const char* what, bool same_dtype) {
  check_tensor(b, what);
  TORCH_CHECK_VALUE(a.device() == b.device(), "peerlink ", what, ": tensors on ", a.device(), " and ", b.device());
  if (same_dtype)
    TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), "peerlink ", what, ": tensors of ", a.scalar_type(), " and ",
                     b.scalar_type());
}

int check_rank(int64_t r, int size, const char* what, const char* role) {
  TORCH_CHECK_VALUE(r >= 0 && r < size, "peerlink ", what, ": ", role, " rank ", r, " is not in [0, ", size, ")");
  return static_cast<int>(r);
}

}  // namespace peerlink::pt
