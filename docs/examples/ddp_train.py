#!/usr/bin/env python3
"""A tiny model trained with DistributedDataParallel on Gloo, rendezvous through canopy.

Run: canopy --sim-nodes 2 --ppn 2 --timing python3 ddp_train.py [--steps 20]
Rank 0 prints one JSON line: the loss at each step (averaged over ranks), and the largest difference between
any two ranks' gradients and final parameters (0.0: DDP kept the replicas identical).
"""
import canopy

# Python's own start-up, to here: every stretch of the start-up is a phase, so the report leaves little unattributed.
canopy.mark_duration("interpreter", canopy.process_seconds())

with canopy.phase("imports"):
    import argparse
    import json
    import os
    import sys

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import canopy.torch


def main():
    with canopy.phase("setup"):
        parser = argparse.ArgumentParser()
        parser.add_argument("--steps", type=int, default=20)
        parser.add_argument("--lr", type=float, default=0.1)
        args = parser.parse_args()
        torch.set_num_threads(1)   # several ranks share each machine's cores

    canopy.torch.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    with canopy.phase("model_built"):
        torch.manual_seed(0)   # the same initial weights everywhere (DDP also broadcasts rank 0's)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        ddp = DistributedDataParallel(model)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
        # Each rank learns the same linear target from its own shard of samples.
        data = torch.Generator().manual_seed(1000 + rank)
        inputs = torch.randn(64, 8, generator=data)
        target = inputs @ torch.linspace(-1.0, 1.0, 8).unsqueeze(1) + 0.5

    def train_step():
        """One step; the loss averaged over the ranks, and how far the ranks' gradients were apart."""
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(inputs), target)
        loss.backward()   # DDP averages the gradients over the ranks here
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        gathered = [torch.empty_like(grads) for _ in range(world)]
        dist.all_gather(gathered, grads)
        optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        return mean_loss.item() / world, max((g - gathered[0]).abs().max().item() for g in gathered)

    # The first step is timed: the report's start-up ends with it (app.first_step).
    with canopy.phase("first_step"):
        steps = [train_step()]
    steps += [train_step() for _ in range(1, args.steps)]
    losses, grad_diff = [loss for loss, _ in steps], max(diff for _, diff in steps)

    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(params) for _ in range(world)]
    dist.all_gather(gathered, params)
    param_diff = max((p - gathered[0]).abs().max().item() for p in gathered)
    canopy.mark("trained")
    if rank == 0:
        print(json.dumps({"world": world, "losses": losses, "max_grad_diff": grad_diff,
                          "max_param_diff": param_diff}), flush=True)
    # Every rank is past its last collective before any leaves.
    dist.barrier()
    canopy.finalize()
    # torch 1.13's Gloo process group can deadlock in its destructor at exit: the main thread, holding the GIL,
    # joins a Gloo worker that waits for the GIL to free a tensor (seen about once in 20 runs under load). Leave
    # without running destructors; there is nothing left to save.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
