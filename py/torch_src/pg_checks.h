// Argument checks shared by the process group's methods: TypeError / ValueError naming the call
// and the values, before anything is enqueued.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace peerlink::pt {

// A dense CPU or CUDA tensor.
void check_tensor(const at::Tensor& t, const char* what);
// The one tensor of a list (c10d passes lists; peerlink, as NCCL, takes one tensor per rank).
at::Tensor single_tensor(const std::vector<at::Tensor>& v, const char* what);
// b on a's device and, where the call moves values of one type, of a's dtype.
void check_like(const at::Tensor& a, const at::Tensor& b, const char* what, bool same_dtype = true);
int check_rank(int64_t r, int size, const char* what, const char* role);

// A tensor the call writes: a contiguous one to write (t itself, or a copy made on the launch's
// stream) and the copy back into t.
struct Writable {
  at::Tensor t, c;
  explicit Writable(const at::Tensor& x) : t(x), c(x.contiguous()) {}
  void done() const {
    if (!c.is_same(t)) t.copy_(c);
  }
};

}  // namespace peerlink::pt
