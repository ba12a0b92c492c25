"""Data-parallel training of a small tabular MLP, exported to ONNX.

job.yaml runs it under torchrun, which strata starts on every member node
of the gang; torchrun gives each worker the environment PyTorch's env://
rendezvous reads (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK,
...). The exec launcher (command: [python3, train.py]) starts it once per
rank with the same variables set by strata itself, and it also runs alone
(world size 1). strata adds GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME and
STRATA_DATASET_DIR / STRATA_OUTPUT_DIR / STRATA_CHECKPOINT_DIR.

Checkpoints: after every epoch rank 0 writes STRATA_CHECKPOINT_DIR/ckpt.pt
(model, optimiser, epoch). When strata restarts the gang after a failure,
rank 0 loads it and broadcasts it to every rank, and training resumes at
the next epoch.

Every rank prints "rank R world W weights SHA256" at the end: the digest of
its final parameters, identical on every rank when DDP kept them in step.

Input: every *.csv under STRATA_DATASET_DIR, with a header; the column named
by LABEL (default "label") holds 0/1, every other column is a float feature.
Output (rank 0 only): STRATA_OUTPUT_DIR/model.onnx with input "input"
[N, features] and output "probability" [N, 1]; standardisation is part of
the exported graph, so the served model takes raw features. Rank 0 also
reports each epoch's loss (over every rank's rows) and train_accuracy in
STRATA_METRICS_FILE, and the last epoch's in STRATA_OUTPUT_DIR/metrics.json.
"""

import glob
import hashlib
import json
import os
import time

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


def accuracy(model, x, y, device):
    with torch.no_grad():
        logits = model(torch.from_numpy(x).to(device)).squeeze(1).cpu().numpy()
    return float(((logits > 0) == (y > 0.5)).mean())


def report_step(epoch, metrics):
    """Appends one step to $STRATA_METRICS_FILE, the agent's per-step
    metrics (strata jobs, sweeps' early stopping)."""
    path = os.environ.get("STRATA_METRICS_FILE")
    if path:
        with open(path, "a") as f:
            print(json.dumps({"step": epoch, **metrics}), file=f, flush=True)


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

    ckpt_dir = os.environ.get("STRATA_CHECKPOINT_DIR", "")
    ckpt = os.path.join(ckpt_dir, "ckpt.pt") if ckpt_dir else ""
    start = 0
    state = [None]
    if rank == 0 and ckpt and os.path.exists(ckpt):
        state[0] = torch.load(ckpt, map_location="cpu")
    if world > 1:
        dist.broadcast_object_list(state, src=0)
    if state[0] is not None:
        model.load_state_dict(state[0]["model"])
        opt.load_state_dict(state[0]["opt"])
        start = state[0]["epoch"] + 1
        if rank == 0:
            print(f"resumed from the checkpoint of epoch {state[0]['epoch']}", flush=True)
    # STALL_AFTER_EPOCH holds the first attempt after that epoch's
    # checkpoint until something stops it (tests kill a rank there).
    stall = int(os.environ.get("STALL_AFTER_EPOCH", "-1"))

    last = {}
    for epoch in range(start, int(os.environ.get("EPOCHS", "5"))):
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
        # The epoch's loss over every rank's rows, and the accuracy of the
        # (identical) weights on the whole table, reported by rank 0.
        stats = torch.tensor([total, float(n)], device=device)
        if world > 1:
            dist.all_reduce(stats)
        epoch_loss = stats[0].item() / max(stats[1].item(), 1)
        if rank == 0:
            acc = accuracy(model, x, y, device)
            print(f"epoch {epoch} loss {epoch_loss:.4f} train_accuracy {acc:.4f}", flush=True)
            report_step(epoch, {"loss": epoch_loss, "train_accuracy": acc})
            last = {"loss": epoch_loss, "train_accuracy": acc, "epochs": epoch + 1, "world_size": world}
            if ckpt:
                tmp = ckpt + ".tmp"
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, tmp)
                os.replace(tmp, ckpt)
        if epoch == stall and os.environ.get("STRATA_ATTEMPT", "1") == "1":
            print(f"rank {rank} holding after epoch {epoch}", flush=True)
            while True:
                time.sleep(0.1)

    digest = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    print(f"rank {rank} world {world} weights {digest.hexdigest()}", flush=True)

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
        # The first rows' probabilities by PyTorch itself, to check the
        # served model against.
        with torch.no_grad():
            rows = torch.from_numpy(x[:4])
            probs = export(rows).squeeze(1).tolist()
        with open(os.path.join(out, "reference-predictions.json"), "w") as f:
            json.dump({"inputs": x[:4].tolist(), "probabilities": probs}, f)
        # The last epoch's figures: strata keeps them in the job's record
        # and the model's lineage.
        if last:
            with open(os.path.join(out, "metrics.json"), "w") as f:
                json.dump(last, f)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
