"""Data-parallel training on the plait backend, launched by torchrun.

    build-torch/venv/bin/torchrun --standalone --nproc_per_node 2 bindings/torch/examples/train_ddp.py

torchrun sets RANK, WORLD_SIZE, MASTER_ADDR/PORT; init_process_group("plait")
reads them (env://), rank 0 publishes Plait's unique id in torchrun's
TCPStore and every rank joins. Each rank trains on its own shard of a
synthetic regression problem; DDP averages the gradients with Plait's
all-reduce; the loss printed by rank 0 falls as the ranks agree on one model.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import plait_torch  # noqa: F401  (registers the "plait" backend)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    dist.init_process_group("plait")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    true_w = torch.randn(32, 1)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(args.batch, 32, generator=g)
        loss = nn.functional.mse_loss(model(x), x @ true_w)
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {avg.item():.4f}  ({world} ranks on plait {plait_torch.version()})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
