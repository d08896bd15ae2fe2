"""torch.distributed training steps with the NCCL backend, one process per GPU (torchrun), for the
distributed verdict on real GPUs (ci/gpu/nccl-run.sh runs it under `faultline exec`; the CPU
counterpart against the stand-ins is testing/nccl_steps.cc).

  --mode table   each step: broadcast from rank 0, all_reduce, reduce_scatter_tensor, then
                 torch.cuda.synchronize (issue 41's two-rank program)
  --mode fsdp    each step, as a sharded data-parallel step: all_gather_into_tensor of the
                 parameters, reduce_scatter_tensor of the gradients, and every --every steps a
                 broadcast from rank 0; then torch.cuda.synchronize
  --desync R:S   (fsdp) rank R skips the broadcast of step S: a planted desync, no fault point
  --steps N      steps (default 8);  --every K  (default 3);  --count N  elements per shard (4096)

Environment (besides torchrun's RANK, LOCAL_RANK, WORLD_SIZE, MASTER_*):
  FL_TORCH_TIMEOUT_S  the process group's timeout (default 600): how long PyTorch's watchdog lets
                      a collective wait (TORCH_NCCL_ASYNC_ERROR_HANDLING decides what it does then;
                      TORCH_NCCL_TRACE_BUFFER_SIZE and TORCH_NCCL_DUMP_ON_TIMEOUT make it dump the
                      flight recorder)
Exit status 0 when every step gave the expected values, 1 when one did not.
"""
import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["table", "fsdp"], default="fsdp")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--every", type=int, default=3)
    p.add_argument("--count", type=int, default=4096)
    p.add_argument("--desync", default="")
    a = p.parse_args()
    desync_rank, desync_step = (int(x) for x in a.desync.split(":")) if a.desync else (-1, -1)
    timeout = datetime.timedelta(seconds=float(os.environ.get("FL_TORCH_TIMEOUT_S", "600")))
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    try:  # device_id: the communicator is made now, in init, not at the first collective
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    except TypeError:
        dist.init_process_group("nccl", timeout=timeout)
    n = a.count
    shard = torch.empty(n, device=device)
    params = torch.empty(n * world, device=device)
    grads = torch.empty(n * world, device=device)
    reduced = torch.empty(n, device=device)
    bcast = torch.empty(n, device=device)
    for step in range(1, a.steps + 1):
        bcast.fill_(100 + step if rank == 0 else -1)
        grads.fill_(rank + 1)
        broadcast = False
        if a.mode == "table":
            dist.broadcast(bcast, src=0)
            broadcast = True
            shard.fill_(rank + step)
            dist.all_reduce(shard)
            dist.reduce_scatter_tensor(reduced, grads)
        else:
            shard.fill_(rank + step)
            dist.all_gather_into_tensor(params, shard)
            dist.reduce_scatter_tensor(reduced, grads)
            if step % a.every == 0 and not (rank == desync_rank and step == desync_step):
                dist.broadcast(bcast, src=0)
                broadcast = True
        torch.cuda.synchronize(device)
        want_reduced = world * (world + 1) / 2
        if reduced[0].item() != want_reduced:
            print(f"rank {rank}: step {step}: reduce_scatter gave {reduced[0].item()}, not {want_reduced}",
                  file=sys.stderr, flush=True)
            return 1
        if a.mode == "fsdp":
            for r in range(world):
                if params[r * n].item() != r + step:
                    print(f"rank {rank}: step {step}: all_gather gave {params[r * n].item()} from rank {r}",
                          file=sys.stderr, flush=True)
                    return 1
        else:
            want = sum(r + step for r in range(world))
            if shard[0].item() != want:
                print(f"rank {rank}: step {step}: all_reduce gave {shard[0].item()}, not {want}", file=sys.stderr,
                      flush=True)
                return 1
        if broadcast and bcast[-1].item() != 100 + step:
            print(f"rank {rank}: step {step}: broadcast gave {bcast[-1].item()}", file=sys.stderr, flush=True)
            return 1
    dist.destroy_process_group()
    print(f"rank {rank}: {a.steps} {a.mode} steps OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
