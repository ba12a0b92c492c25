"""Data-parallel training of a small tabular MLP, exported to ONNX.

strata's exec launcher starts this script once per gang member with the
environment PyTorch's env:// rendezvous reads (MASTER_ADDR, MASTER_PORT,
WORLD_SIZE, RANK, LOCAL_RANK), NCCL interface hints from the fabric, and
STRATA_DATASET_DIR / STRATA_OUTPUT_DIR. The same script also runs under
torchrun, which sets the same variables, and alone (world size 1).

Input: every *.csv under STRATA_DATASET_DIR, with a header; the column named
by LABEL (default "label") holds 0/1, every other column is a float feature.
Output (rank 0 only): STRATA_OUTPUT_DIR/model.onnx with input "input"
[N, features] and output "probability" [N, 1]; standardisation is part of
the exported graph, so the served model takes raw features.
"""

import glob
import os

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def load(dataset_dir, label):
    files = sorted(glob.glob(os.path.join(dataset_dir, "*.csv")))
    if not files:
        raise SystemExit(f"train.py: no *.csv in {dataset_dir}")
    xs, ys = [], []
    for path in files:
        with open(path) as f:
            header = f.readline().strip().split(",")
        if label not in header:
            raise SystemExit(f"train.py: {path} has no column {label!r}")
        data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32, ndmin=2)
        li = header.index(label)
        ys.append(data[:, li])
        xs.append(np.delete(data, li, axis=1))
    return np.concatenate(xs), np.concatenate(ys)


class Model(nn.Module):
    def __init__(self, mean, std, hidden):
        super().__init__()
        self.register_buffer("mean", torch.from_numpy(mean))
        self.register_buffer("std", torch.from_numpy(std))
        features = mean.shape[0]
        self.net = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.net((x - self.mean) / self.std)


def main():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    device = torch.device("cuda") if use_cuda else torch.device("cpu")
    if world > 1:
        dist.init_process_group("nccl" if use_cuda else "gloo", init_method="env://")

    torch.manual_seed(int(os.environ.get("SEED", "1")))
    x, y = load(os.environ.get("STRATA_DATASET_DIR", "."), os.environ.get("LABEL", "label"))
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std == 0] = 1.0

    model = Model(mean, std, int(os.environ.get("HIDDEN", "64"))).to(device)
    ddp = DDP(model, device_ids=[device.index] if use_cuda else None) if world > 1 else model

    ds = TensorDataset(torch.from_numpy(x), torch.from_numpy(y).unsqueeze(1))
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True) if world > 1 else None
    loader = DataLoader(ds, batch_size=int(os.environ.get("BATCH", "256")),
                        sampler=sampler, shuffle=sampler is None)
    opt = torch.optim.Adam(ddp.parameters(), lr=float(os.environ.get("LR", "1e-3")))
    loss_fn = nn.BCEWithLogitsLoss()

    for epoch in range(int(os.environ.get("EPOCHS", "5"))):
        if sampler is not None:
            sampler.set_epoch(epoch)
        total, n = 0.0, 0
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad()
            loss = loss_fn(ddp(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
            n += len(xb)
        if rank == 0:
            print(f"epoch {epoch} loss {total / max(n, 1):.4f}", flush=True)

    if rank == 0:
        out = os.environ.get("STRATA_OUTPUT_DIR", ".")
        os.makedirs(out, exist_ok=True)
        export = nn.Sequential(model, nn.Sigmoid()).cpu().eval()
        torch.onnx.export(
            export, torch.zeros(1, x.shape[1]), os.path.join(out, "model.onnx"),
            input_names=["input"], output_names=["probability"],
            dynamic_axes={"input": {0: "N"}, "probability": {0: "N"}},
            opset_version=17,
        )
        print(f"wrote {os.path.join(out, 'model.onnx')}", flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
