#!/usr/bin/env python3
"""PyTorch Geometric reference for link prediction on a GraphTensor link dataset (issue 44).

Reads the file `gt-data link-split` writes (docs/dataset-format.md, "Link datasets") with h5py,
so both sides train and evaluate on the same split: the message-passing graph is the file's CSR
(both directions of every train pair, no valid or test edge), positives /link/train, evaluation
on /link/valid and /link/test against their fixed negatives /link/valid_neg and /link/test_neg.

Model: a GraphSAGE encoder (SAGEConv, mean aggregation, root weight), ReLU and dropout between
layers, a dot-product decoder, binary cross-entropy with logits on positives (label 1) and k
uniform negatives per positive (label 0): dst drawn uniformly from all nodes, redrawn when it
equals the pair's dst or src or (with --exclude-known, the default) is a train neighbour of src,
as GraphTensor's EdgeBatcher draws them (link.exclude_known). Each epoch the train pairs are
shuffled and cut into batches; every batch encodes the whole graph (Cora is small) without the
batch's own pairs in either direction (--exclude-seed-edges, the default: GraphTensor's training
blocks exclude them, so no label leaks through message passing) and takes one Adam step. After each epoch, ROC-AUC (Mann-Whitney with mid-ranks, as
framework/core/task_metrics.cc) of valid and test; the test figure at the first epoch with the
best valid figure is reported, per seed and as a mean.

  python3 bench/baselines/pyg_link.py FILE.h5 [--layers 2] [--hidden 128] [--out 64]
          [--epochs 100] [--batch-size 1024] [--negatives 1] [--lr 0.01] [--dropout 0.0]
          [--normalize row|none] [--seeds 5] [--device cuda] [--json OUT]
          [--no-exclude-seed-edges] [--no-exclude-known]
"""
import argparse
import json
import statistics
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv


def roc_auc(pos, neg):
    """Mann-Whitney U / (|pos| |neg|) with mid-ranks for ties."""
    scores = torch.cat([pos, neg]).double()
    order = torch.argsort(scores)
    sorted_scores = scores[order]
    ranks = torch.empty_like(scores)
    n = scores.numel()
    i = 0
    s = sorted_scores.cpu().numpy()
    r = np.empty(n)
    while i < n:
        j = i
        while j + 1 < n and s[j + 1] == s[i]:
            j += 1
        r[i:j + 1] = (i + j) / 2.0 + 1.0
        i = j + 1
    ranks[order] = torch.from_numpy(r).to(ranks.device)
    n_pos, n_neg = pos.numel(), neg.numel()
    u = ranks[:n_pos].sum().item() - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


class Encoder(torch.nn.Module):
    def __init__(self, dims, dropout):
        super().__init__()
        self.convs = torch.nn.ModuleList(SAGEConv(a, b, aggr="mean") for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i + 1 < len(self.convs):
                x = F.relu(x)
                x = F.dropout(x, self.dropout, self.training)
        return x


def load(path, normalize, device):
    with h5py.File(path, "r") as f:
        indptr = f["/graph/indptr"][:].astype(np.int64)
        indices = f["/graph/indices"][:].astype(np.int64)
        x = f["/features"][:]
        if x.dtype != np.float32:
            raise SystemExit(f"{path}: /features is {x.dtype}; this script reads float32 tables")
        link = {k: f["/link/" + k][:].astype(np.int64) for k in f["/link"].keys()}
    if normalize == "row":
        s = x.sum(axis=1, keepdims=True)
        x = np.divide(x, s, out=np.zeros_like(x), where=s != 0)
    n = indptr.size - 1
    dst = np.repeat(np.arange(n), np.diff(indptr))  # row v lists the sources u of u -> v
    edge_index = torch.from_numpy(np.stack([indices, dst])).to(device)
    return torch.from_numpy(x).to(device), edge_index, {k: torch.from_numpy(v).to(device) for k, v in link.items()}


def scores(z, pairs):
    return (z[pairs[:, 0]] * z[pairs[:, 1]]).sum(dim=1)


def run(args, x, edge_index, link, seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    dev = x.device
    n = x.shape[0]
    dims = [x.shape[1]] + [args.hidden] * (args.layers - 1) + [args.out]
    model = Encoder(dims, args.dropout).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    train = link["train"]
    edge_keys = edge_index[0] * n + edge_index[1]
    known = torch.cat([train[:, 0] * n + train[:, 1], train[:, 1] * n + train[:, 0]])
    best = (-1.0, 0.0, 0)
    epoch_s = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        perm = torch.randperm(train.shape[0], device=dev)
        for b in range(0, train.shape[0], args.batch_size):
            pos = train[perm[b:b + args.batch_size]]
            src = pos[:, 0].repeat_interleave(args.negatives)
            pdst = pos[:, 1].repeat_interleave(args.negatives)
            ndst = torch.randint(0, n, src.shape, device=dev)
            def refused():
                r = (ndst == pdst) | (ndst == src)
                return r | torch.isin(src * n + ndst, known) if args.exclude_known else r
            bad = refused()
            while bad.any():  # redraw the refused draws
                ndst[bad] = torch.randint(0, n, (int(bad.sum()),), device=dev)
                bad = refused()
            mp = edge_index
            if args.exclude_seed_edges:
                seeds = torch.cat([pos[:, 0] * n + pos[:, 1], pos[:, 1] * n + pos[:, 0]])
                mp = edge_index[:, ~torch.isin(edge_keys, seeds)]
            z = model(x, mp)
            ps = scores(z, pos)
            ns = scores(z, torch.stack([src, ndst], dim=1))
            loss = F.binary_cross_entropy_with_logits(torch.cat([ps, ns]),
                                                      torch.cat([torch.ones_like(ps), torch.zeros_like(ns)]))
            opt.zero_grad()
            loss.backward()
            opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        epoch_s.append(time.perf_counter() - t0)
        model.eval()
        with torch.no_grad():
            z = model(x, edge_index)
            valid = roc_auc(scores(z, link["valid"]), scores(z, link["valid_neg"]))
            test = roc_auc(scores(z, link["test"]), scores(z, link["test_neg"]))
        if valid > best[0]:
            best = (valid, test, epoch)
    return best, statistics.median(epoch_s)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--out", type=int, default=64)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--negatives", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--normalize", choices=["row", "none"], default="row")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default="")
    p.add_argument("--no-exclude-seed-edges", dest="exclude_seed_edges", action="store_false")
    p.add_argument("--no-exclude-known", dest="exclude_known", action="store_false")
    args = p.parse_args()
    x, edge_index, link = load(args.file, args.normalize, torch.device(args.device))
    for k in ("train", "valid", "valid_neg", "test", "test_neg"):
        if k not in link:
            raise SystemExit(f"{args.file}: no /link/{k} (make it with gt-data link-split ... --negatives K)")
    tests, valids, times = [], [], []
    for seed in range(args.seeds):
        (valid, test, epoch), t = run(args, x, edge_index, link, seed)
        print(f"seed {seed}: best valid ROC-AUC {valid:.4f} at epoch {epoch}, test {test:.4f}, epoch {t * 1e3:.1f} ms")
        tests.append(test)
        valids.append(valid)
        times.append(t)
    mean = statistics.mean(tests)
    std = statistics.pstdev(tests)
    print(f"PyG GraphSAGE link prediction: test ROC-AUC {mean:.4f} +- {std:.4f} over {args.seeds} seeds "
          f"(valid {statistics.mean(valids):.4f}), epoch {statistics.median(times) * 1e3:.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"test": tests, "valid": valids, "mean": mean, "std": std, "epoch_s": times,
                       "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
