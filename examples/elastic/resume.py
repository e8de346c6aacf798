"""A job preempted mid-epoch that comes back on another number of ranks: with
split="elastic" it finishes the epoch with no sample repeated or skipped (beyond what
`even` pads), and each sample's augmentation is the one it would have had.

    torchrun --nproc_per_node 4 examples/elastic/resume.py DATA --stop-after 3 --state loader.pt
    torchrun --nproc_per_node 2 examples/elastic/resume.py DATA --state loader.pt

DATA: shards, an ImageFolder tree, anything a Loader reads. --ledger DIR writes the keys
each rank read (one file a rank and run), for checking the whole epoch afterwards.
"""
from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

import gpudecode
from gpudecode import transforms as T


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--batch-size", type=int, default=4, help="per rank")
    ap.add_argument("--stop-after", type=int, default=0, help="steps, then save the state and stop (a preemption)")
    ap.add_argument("--state", default="loader.pt")
    ap.add_argument("--ledger", default=None)
    args = ap.parse_args()
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1

    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    loader = gpudecode.Loader(args.data, batch_size=args.batch_size, transform=tf, device="cpu", seed=0,
                              split="elastic")
    if os.path.exists(args.state):  # saved by a job of any world size
        loader.load_state_dict(torch.load(args.state))
    keys = []
    for step, batch in enumerate(loader):
        keys += batch.keys  # (the training step goes here)
        if args.stop_after and step + 1 == args.stop_after:
            if rank == 0:  # at a step, every rank's state holds the same global position
                torch.save(loader.state_dict(), args.state)
            break
    if args.ledger:
        os.makedirs(args.ledger, exist_ok=True)
        with open(os.path.join(args.ledger, f"world{world}-rank{rank}.txt"), "w") as f:
            f.write("\n".join(keys) + "\n")
    print(f"rank {rank} of {world}: {len(keys)} samples")
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
