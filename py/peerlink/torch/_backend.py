"""Registration of the c10d backend "peerlink" and its creator function."""
import datetime
import hashlib
import os
import socket

import torch.distributed as dist

BACKEND_NAME = "peerlink"


def host_id() -> str:
    """This process's host identity, as peerlink's multi-node layer defines it: PEERLINK_HOSTID, else
    NCCL_HOSTID, else the hostname up to its first '.' with a hash of the kernel's boot id (as NCCL's
    host hash)."""
    for var in ("PEERLINK_HOSTID", "NCCL_HOSTID"):
        value = os.environ.get(var, "").strip()
        if value:
            return value
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname().split('.')[0]}:{hashlib.sha1(boot.encode()).hexdigest()[:12]}"


def _timeout_ms(timeout) -> int:
    """The group's communicators bound every wait by torch's timeout of the group, unless
    PEERLINK_TIMEOUT_MS says otherwise (peerlink validates that value)."""
    env = os.environ.get("PEERLINK_TIMEOUT_MS", "").strip()
    if env:
        try:
            return int(env)
        except ValueError:
            raise ValueError(f"PEERLINK_TIMEOUT_MS={env!r} is not a number of milliseconds") from None
    if isinstance(timeout, datetime.timedelta):
        return max(1, int(timeout.total_seconds() * 1000))
    return 60000


def _engine_backend(timeout):
    """The maker of the torch backends a group spanning nodes runs between its nodes:
    ProcessGroupNCCL (the real NCCL) for CUDA tensors, gloo for CPU tensors, over the ranks that meet
    through `store` (a prefix of the group's store)."""
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(milliseconds=60000)

    def make(store, rank, size, device):
        if device == "cuda":
            if not dist.is_nccl_available():
                raise RuntimeError("peerlink: a CUDA group spanning nodes needs torch's NCCL between nodes, "
                                   "and this torch has none")
            nccl_opts = dist.ProcessGroupNCCL.Options()
            nccl_opts._timeout = timeout
            return dist.ProcessGroupNCCL(store, rank, size, nccl_opts)
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    return make


def _create(opts, backend_options=None):
    """c10d's extended creator API: opts is a _DistributedBackendOptions."""
    if backend_options is not None:
        raise ValueError(f"peerlink takes no backend options (got {type(backend_options).__name__})")
    from . import _C

    # Test hook: the unique ids (and so the SHM segments) of a test run carry its tag, which the
    # leak check (scripts/check_shm_clean.sh) looks for.
    prefix = os.environ.get("PEERLINK_TEST_RUN") or "pt"
    return _C.ProcessGroupPeerlink(opts.store, opts.group_rank, opts.group_size, str(opts.group_id), host_id(),
                                   _timeout_ms(opts.timeout), prefix, _engine_backend(opts.timeout))


def register_backend() -> None:
    """Registers "peerlink" with torch.distributed for CUDA and CPU devices (done by importing
    peerlink.torch; calling it again is harmless)."""
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cuda", "cpu"])
