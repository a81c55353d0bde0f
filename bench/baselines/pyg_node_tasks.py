#!/usr/bin/env python3
"""PyTorch Geometric reference for issue 48's node tasks (docs/tasks.md, docs/benchmarks.md).

Trains GCN (GCNConv: symmetric normalisation with self loops) and GraphSAGE (SAGEConv, mean)
full batch the way PyG's users do: 2 layers, hidden 64, dropout 0.5 on each layer's input (as
GraphTensor's layers), ReLU between the layers, Adam lr 0.01, weight decay 5e-4, 200 epochs,
evaluated every epoch; the test metric at the first epoch with the best validation metric; 5 seeds.

Modes, per dataset:
  multiclass  C logits, softmax cross-entropy, selected by accuracy (every dataset; what
              ../shared/data/README.md reports; gt-train: model.task multiclass)
  binary      1 logit, sigmoid binary cross-entropy, selected by ROC-AUC (datasets with 2
              classes; gt-train: model.task binary, train.select_by roc_auc = its auto)
Nodes labelled -1 are left out of the loss and of every metric. ROC-AUC is the Mann-Whitney
statistic with mid-ranks (ties count one half), as framework/core/task_metrics.cc computes it.

DATA_DIR holds datasets in OGB's raw layout (what `gt-data import-ogb` reads):
  NAME/raw/{edge,node-feat,node-label}.csv.gz and NAME/split/<scheme>/{train,valid,test}.csv.gz
Edges are made undirected with self loops dropped (as the importer does; GCNConv adds its own).
Cora's feature rows are divided by their sums (gt-train: dataset.normalize row), the others are
used as they are. Nothing is downloaded.

  python3 bench/baselines/pyg_node_tasks.py DATA_DIR [--datasets cora,cornell5,twitch-de]
          [--models gcn,sage] [--seeds 5] [--epochs 200] [--device cuda] [--json FILE]

Prints one line per (dataset, model, mode) and, at the end, all results as one JSON object
{dataset: {model: {mode: {"metric", "test": [per seed], "mean", "std", "valid_mean",
"test_acc_mean", "epoch_ms"}}}}.
"""
import argparse
import gzip
import json
import os
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv, SAGEConv
from torch_geometric.utils import remove_self_loops, to_undirected


def read_csv(path, dtype):
    with gzip.open(path, "rt") as f:
        text = f.read()
    return np.loadtxt(text.splitlines(), delimiter=",", dtype=dtype, ndmin=1)


def read_labels(path):
    out = []
    with gzip.open(path, "rt") as f:
        for line in f:
            s = line.strip()
            out.append(-1 if s in ("", "nan", "NaN", "NAN") else int(float(s)))
    return np.array(out, dtype=np.int64)


def load(data_dir, name, device):
    root = os.path.join(data_dir, name)
    x = torch.tensor(read_csv(os.path.join(root, "raw", "node-feat.csv.gz"), np.float32))
    if x.dim() == 1:
        x = x[:, None]
    n = x.size(0)
    y = torch.tensor(read_labels(os.path.join(root, "raw", "node-label.csv.gz"))[:n])
    edges = read_csv(os.path.join(root, "raw", "edge.csv.gz"), np.int64).reshape(-1, 2)
    edge_index = torch.tensor(edges.T.copy())
    edge_index, _ = remove_self_loops(edge_index)
    edge_index = to_undirected(edge_index, num_nodes=n)
    if name.startswith("cora"):  # PyG's NormalizeFeatures (Cora and its one-vs-rest binaries): rows divided by their sums
        x = x - x.min()
        x = x / x.sum(1, keepdim=True).clamp(min=1)
    schemes = sorted(os.listdir(os.path.join(root, "split")))
    assert len(schemes) == 1, f"{root}/split holds {schemes}: expected one scheme"
    split = {}
    for part in ("train", "valid", "test"):
        ids = torch.tensor(read_csv(os.path.join(root, "split", schemes[0], part + ".csv.gz"), np.int64))
        split[part] = ids[y[ids] >= 0]  # labelled nodes only
    return x.to(device), y.to(device), edge_index.to(device), {k: v.to(device) for k, v in split.items()}


class Net(torch.nn.Module):
    def __init__(self, kind, d_in, hidden, d_out, dropout):
        super().__init__()
        conv = (lambda a, b: GCNConv(a, b)) if kind == "gcn" else (lambda a, b: SAGEConv(a, b, aggr="mean"))
        self.convs = torch.nn.ModuleList([conv(d_in, hidden), conv(hidden, d_out)])
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, self.dropout, self.training)
            x = conv(x, edge_index)
            if i + 1 < len(self.convs):
                x = F.relu(x)
        return x


def roc_auc(scores, labels):
    """P(positive scores above negative), ties 1/2: mid-rank Mann-Whitney U; NaN for one class."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels)
    pos, neg = int((y == 1).sum()), int((y == 0).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    s_sorted = s[order]
    ranks = np.empty(len(s), dtype=np.float64)
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s_sorted[j] == s_sorted[i]:
            j += 1
        ranks[order[i:j]] = (i + 1 + j) / 2.0  # mean of the 1-based ranks i+1 .. j
        i = j
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def run(kind, mode, data, seed, epochs, classes):
    x, y, edge_index, split = data
    torch.manual_seed(seed)
    np.random.seed(seed)
    out_dim = classes if mode == "multiclass" else 1
    model = Net(kind, x.size(1), 64, out_dim, 0.5).to(x.device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    tr = split["train"]

    def loss_of(z):
        if mode == "multiclass":
            return F.cross_entropy(z[tr], y[tr])
        return F.binary_cross_entropy_with_logits(z[tr, 0], y[tr].float())

    def metrics(z, ids):
        if mode == "multiclass":
            acc = (z[ids].argmax(1) == y[ids]).float().mean().item()
            return acc, acc
        s = z[ids, 0]
        acc = ((s > 0).long() == y[ids]).float().mean().item()
        return roc_auc(s.detach().cpu().numpy(), y[ids].cpu().numpy()), acc

    best_valid, best = -1.0, None
    times = []
    for epoch in range(1, epochs + 1):
        if x.is_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        loss = loss_of(model(x, edge_index))
        loss.backward()
        opt.step()
        if x.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        model.eval()
        with torch.no_grad():
            z = model(x, edge_index)
        valid, _ = metrics(z, split["valid"])
        if valid > best_valid:  # the first best epoch (NaN never wins)
            test, test_acc = metrics(z, split["test"])
            best_valid, best = valid, (epoch, valid, test, test_acc)
    return best, 1e3 * statistics.median(times[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_dir")
    ap.add_argument("--datasets", default="cora,cornell5,twitch-de")
    ap.add_argument("--models", default="gcn,sage")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", default="", help="also write the JSON object to this file")
    a = ap.parse_args()
    results = {}
    for name in a.datasets.split(","):
        data = load(a.data_dir, name, torch.device(a.device))
        classes = int(data[1].max().item()) + 1
        modes = ["multiclass"] + (["binary"] if classes == 2 else [])
        for kind in a.models.split(","):
            for mode in modes:
                runs = [run(kind, mode, data, seed, a.epochs, classes) for seed in range(a.seeds)]
                tests = [r[0][2] for r in runs]
                entry = {
                    "metric": "accuracy" if mode == "multiclass" else "roc_auc",
                    "test": tests,
                    "best_epoch": [r[0][0] for r in runs],
                    "mean": statistics.mean(tests),
                    "std": statistics.stdev(tests) if len(tests) > 1 else 0.0,
                    "valid_mean": statistics.mean(r[0][1] for r in runs),
                    "test_acc_mean": statistics.mean(r[0][3] for r in runs),
                    "epoch_ms": statistics.median(r[1] for r in runs),
                }
                results.setdefault(name, {}).setdefault(kind, {})[mode] = entry
                print(f"{name:10s} {kind:5s} {mode:10s} test {entry['metric']} {100 * entry['mean']:.2f} "
                      f"+- {100 * entry['std']:.2f} (valid {100 * entry['valid_mean']:.2f}, test accuracy "
                      f"{100 * entry['test_acc_mean']:.2f}), {entry['epoch_ms']:.2f} ms/step", flush=True)
    text = json.dumps(results, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
