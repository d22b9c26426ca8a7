"""Fake implementations of torch.ops.peerlink (shapes and dtypes only), for torch.compile and other
tracing; the extension names this module as theirs (TORCH_LIBRARY set_python_module)."""
import torch

import peerlink.torch  # noqa: F401  (defines the ops when this module is imported on its own)


@torch.library.register_fake("peerlink::all_reduce")
def _all_reduce(input, op, group_name):
    return input.new_empty(input.shape)


@torch.library.register_fake("peerlink::all_reduce_")
def _all_reduce_(input, op, group_name):
    return input


@torch.library.register_fake("peerlink::all_gather_into_tensor")
def _all_gather_into_tensor(input, group_size, group_name):
    shape = list(input.shape)
    shape[0] = shape[0] * group_size
    return input.new_empty(shape)


@torch.library.register_fake("peerlink::reduce_scatter_tensor")
def _reduce_scatter_tensor(input, op, group_size, group_name):
    shape = list(input.shape)
    torch._check(shape[0] % group_size == 0, lambda: f"first dimension {shape[0]} does not divide by {group_size}")
    shape[0] = shape[0] // group_size
    return input.new_empty(shape)


@torch.library.register_fake("peerlink::all_to_all_single")
def _all_to_all_single(input, output_split_sizes, input_split_sizes, group_name):
    shape = list(input.shape)
    if output_split_sizes:
        shape[0] = sum(output_split_sizes)
    return input.new_empty(shape)


@torch.library.register_fake("peerlink::fused_allreduce_add_rms_norm")
def _fused_allreduce_add_rms_norm(input, residual, weight, eps, group_name, weight_bias=0.0):
    return None


@torch.library.register_fake("peerlink::fused_allreduce_add_rms_norm_functional")
def _fused_allreduce_add_rms_norm_functional(input, residual, weight, eps, group_name, weight_bias=0.0):
    return input.new_empty(input.shape), residual.new_empty(residual.shape)


@torch.library.register_fake("peerlink::fused_allreduce_add_rms_norm_fp8")
def _fused_allreduce_add_rms_norm_fp8(out, input, residual, weight, scale, eps, group_name, weight_bias=0.0):
    return None
