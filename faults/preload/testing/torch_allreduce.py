"""torch.distributed with the NCCL backend, as a training job uses it: one process per GPU
(launched by `torchrun --nproc-per-node 2`), an allreduce in a loop, each result checked.
ci/gpu/nccl-run.sh runs it unchanged under `faultline exec` with and without nccl/ points.

Environment (besides torchrun's RANK, LOCAL_RANK, WORLD_SIZE, MASTER_*):
  FL_ITERS            allreduces (default 20)
  FL_TORCH_TIMEOUT_S  the process group's timeout: how long PyTorch's watchdog lets a collective
                      wait before it acts (TORCH_NCCL_ASYNC_ERROR_HANDLING decides how; default 600)
Exit status 0 when every allreduce gave the expected sum, 1 when one did not.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    iters = int(os.environ.get("FL_ITERS", "20"))
    timeout = datetime.timedelta(seconds=float(os.environ.get("FL_TORCH_TIMEOUT_S", "600")))
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    try:  # device_id: the communicator is made now, in init, not at the first collective
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    except TypeError:
        dist.init_process_group("nccl", timeout=timeout)
    t = torch.empty(1024, device=device)
    for i in range(iters):
        t.fill_(rank + 1 + i)
        dist.all_reduce(t)
        torch.cuda.synchronize(device)
        want = world * (world + 1) / 2 + world * i
        if t[0].item() != want:
            print(f"rank {rank}: allreduce {i + 1} gave {t[0].item()}, not {want}", file=sys.stderr, flush=True)
            return 1
    dist.destroy_process_group()
    print(f"rank {rank}: {iters} allreduces OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
