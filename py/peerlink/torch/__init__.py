"""peerlink.torch: peerlink as a torch.distributed backend, and collectives as torch custom ops.

    import peerlink.torch                                   # registers the c10d backend "peerlink"
    dist.init_process_group("cuda:peerlink,cpu:gloo")       # the whole job on peerlink (one node)
    tp = dist.new_group([0, 1], backend="peerlink")         # or one group, beside NCCL
    dist.all_reduce(x, group=tp)                            # c10d, functional collectives, DTensor, FSDP2
    y = torch.ops.peerlink.all_reduce(x, "sum", tp.group_name)   # traced by torch.compile

The backend runs CUDA tensors on the group's peerlink communicator (created by its first call) and
CPU tensors on peerlink's host backend ("cpu:peerlink"). Streams follow ProcessGroupNCCL. The
package's py/README.md, section "PyTorch", has the details and limits.
"""
try:
    import torch
    import torch.distributed as _dist
except ImportError as _e:
    raise ImportError(
        f"peerlink.torch needs PyTorch, which this Python cannot import ({_e}): install torch, then reinstall "
        "peerlink with `pip install --no-build-isolation ./py` so that its torch extension is built against it"
    ) from _e
if not _dist.is_available():
    raise ImportError("peerlink.torch needs torch.distributed, which this build of torch does not have")

from ._extension import load as _load

_C = _load()

from . import _fake  # noqa: E402,F401  (the fake implementations of torch.ops.peerlink)
from ._backend import BACKEND_NAME, host_id, register_backend  # noqa: E402

register_backend()

ProcessGroupPeerlink = _C.ProcessGroupPeerlink

__all__ = ["BACKEND_NAME", "ProcessGroupPeerlink", "host_id", "register_backend"]
