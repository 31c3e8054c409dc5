"""Plait as a torch.distributed backend.

    import plait_torch                     # registers the backend "plait"
    import torch.distributed as dist
    dist.init_process_group("plait")       # under torchrun, file://, or mp.spawn

Every c10d collective runs on CPU tensors through Plait's C API (the same
libnccl ABI NCCL programs use), asynchronously on a Plait host stream per
process group; on CUDA tensors (cuda_built(): where torch has CUDA) the same
calls are enqueued on torch's current stream, as NCCL's backend does (not yet
run on a GPU). Rendezvous goes through the store torch gives the backend:
rank 0 publishes Plait's unique id there.
"""
import os

import torch
import torch.distributed as dist

from . import _C

__all__ = ["ProcessGroupPlait", "cuda_built", "library_path", "version"]

ProcessGroupPlait = _C.ProcessGroupPlait
cuda_built = _C.cuda_built
library_path = _C.library_path
version = _C.version


def _create_backend(store, rank, size, timeout):
    # Plait's own deadline (every wait inside the library) follows the first
    # group's timeout unless PLAIT_TIMEOUT (seconds) is set; a Work's wait()
    # enforces each group's timeout itself and aborts the communicator then.
    os.environ.setdefault("PLAIT_TIMEOUT", str(max(1, int(timeout.total_seconds()))))
    return _C.ProcessGroupPlait(store, rank, size, timeout)


if "plait" not in dist.Backend.backend_list:
    dist.Backend.register_backend("plait", _create_backend, devices=["cpu", "cuda"])
