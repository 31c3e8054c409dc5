"""DDP and ZeroRedundancyOptimizer on one backend: rank programs of test_backend.py.

Each trains the same small model from the same seed on data that depends only
on (rank, step), and saves the losses and final parameters, so the runs on
"gloo" and "plait" can be compared.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(32, 16, generator=g), torch.randn(32, 4, generator=g)


VARIANTS = ("ddp", "ddp_hooks", "zero", "fsdp")


def train(rank, world, backend, init, out_prefix):
    """Every variant in turn in one process group (one start-up per backend)."""
    if backend == "plait":
        import plait_torch  # noqa: F401
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    results = {variant: train_one(rank, world, variant) for variant in VARIANTS}
    torch.save(results, f"{out_prefix}.{rank}")
    dist.destroy_process_group()


def train_one(rank, world, variant):
    net = model()
    if variant == "ddp":
        ddp = DDP(net, bucket_cap_mb=0.01)  # several buckets: overlapping all-reduces
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    elif variant == "ddp_hooks":
        # gradient_as_bucket_view, a comm hook on futures, no_sync every other step
        ddp = DDP(net, gradient_as_bucket_view=True, bucket_cap_mb=0.01)
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    elif variant == "fsdp":
        # FSDP2: parameters sharded per layer (all_gather_into_tensor forward,
        # reduce_scatter_tensor backward), on a CPU device mesh
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for layer in net:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        ddp = fully_shard(net, mesh=mesh)
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
    else:  # zero
        ddp = DDP(net)
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    losses = []
    for step in range(20):
        x, y = batch(rank, step)
        if variant == "ddp_hooks" and step % 2 == 0:
            with ddp.no_sync():
                nn.functional.mse_loss(ddp(x), y).backward()
            continue
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # with the no_sync step's gradients, in ddp_hooks
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    if variant == "zero":
        opt.consolidate_state_dict(to=0)
    params = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in net.parameters()]  # FSDP2: DTensor
    return {"losses": torch.stack(losses), "params": [p.detach().clone() for p in params]}
