// torch.ops.peerlink: the group lookup and the fused ops' registration (fused_ops.cpp).
#pragma once
#include <torch/library.h>

#include <string>

#include "process_group.h"

namespace peerlink::pt {

// The peerlink backend of the group torch names `group_name` for `device`'s type; ValueError when
// that group runs such tensors on another backend.
c10::intrusive_ptr<ProcessGroupPeerlink> backend_of(const std::string& group_name, const at::Device& device,
                                                    const char* what);

void define_fused_ops(torch::Library& m);
void impl_fused_ops(torch::Library& m);

}  // namespace peerlink::pt
