#!/usr/bin/env python3
"""GCN, GraphSAGE, NGCF, GIN and GAT with PyTorch Geometric: the reference for configs/cora-*.yaml.

Trains the same architectures with the same hyper-parameters as GraphTensor's configs, full-batch
on the GPU, for 5 seeds, and prints the mean test accuracy at the best validation epoch (first
best epoch, evaluated every epoch), to compare with `bench/run.sh accuracy`'s output (within 2
points).
With --time it also times one full-batch training step (forward, loss, backward, Adam; median of
CUDA-event timings after warm-up) and reports the peak GPU memory, to compare with gt-train's epoch
time in the same regime (docs/benchmarks.md, "Cornell5 and Twitch-DE").

  python3 bench/baselines/pyg_models.py DATA_DIR [--models ngcf,gin,gat] [--seeds 5] [--epochs 200]
                                [--split NAME] [--normalize row|none] [--time] [--json FILE]
                                [--init-from MODEL.h5] [--dropout P] [--trace FILE]

A matched comparison (GIN): --init-from starts every seed from the weights of a GraphTensor model
file (train.save_best of a run with optimizer.lr=0 holds the initial weights), --dropout 0 takes
the random masks out, and --trace writes seed 0's loss and accuracies per epoch as JSON lines
({"epoch", "loss", "valid", "test"}), to set beside gt-train's train.metrics file: with the same
weights and no dropout the two runs compute the same function of the same data.

DATA_DIR is a dataset in OGB's raw layout (what `gt-data import-ogb` reads), for example
shared/data/cora: raw/node-feat.csv.gz, raw/edge.csv.gz, raw/node-label.csv.gz and
split/planetoid/{train,valid,test}.csv.gz. Edges are made undirected (as the importer does) and
feature rows are divided by their sums (dataset.normalize: row). Nothing is downloaded.

The models, as models/{gcn,sage,ngcf,gin,gat}.cc define them (GCN: PyG's GCNConv, whose symmetric
normalisation differs from GraphTensor's mean with a self loop; GraphSAGE: SAGEConv, mean, or sum
and max as sage-sum and sage-max, GraphTensor's model.aggregation):
  ngcf  2 x NGCFConv (mean of x_u and of x_u * x_v; LeakyReLU(W1 (side + x_v) + W2 inter + b, 0.2)
        after every layer, the output too), hidden 64, dropout 0.5, Adam lr 0.01, wd 5e-4.
        One bias (W2 has none): pyg_baseline.py's two biases only ever act as their sum.
  gin   2 x GINConv(eps = 0 fixed, MLP Linear(in, 64) - ReLU - Linear(64, out)), ReLU after the
        hidden layer, hidden 64, dropout 0.5, Adam lr 0.01, wd 5e-4.
  gat   GATConv(in, 8, heads 8) - ELU - GATConv(64, classes, heads 1), self loops, LeakyReLU 0.2
        scores, dropout 0.6 on each layer's input and on the attention coefficients (GATConv's
        dropout, model.attn_dropout in GraphTensor), Adam lr 0.005, wd 5e-4.
Dropout is applied to every layer's input while training, as GraphTensor's layers do.
"""
import argparse, json, os, statistics, sys, time

import numpy as np
import torch
import torch.nn.functional as Fn
from torch_geometric.nn import GATConv, GCNConv, GINConv, MessagePassing, SAGEConv
from torch_geometric.utils import to_undirected

HPARAMS = {  # hidden, dropout, lr, weight decay
    "gcn": (64, 0.5, 0.01, 5e-4),
    "sage": (64, 0.5, 0.01, 5e-4),
    "sage-sum": (64, 0.5, 0.01, 5e-4),  # SAGEConv(aggr="sum"): configs/cora-sage.yaml with model.aggregation=sum
    "sage-max": (64, 0.5, 0.01, 5e-4),  # SAGEConv(aggr="max"): ... with model.aggregation=max
    "ngcf": (64, 0.5, 0.01, 5e-4),
    "gin": (64, 0.5, 0.01, 5e-4),
    "gat": (8, 0.6, 0.005, 5e-4),
}


def read_csv(path, dtype):
    return np.loadtxt(path, delimiter=",", dtype=dtype, ndmin=1)


def load(folder, split, normalize=True):
    raw = os.path.join(folder, "raw")
    for f in ("node-feat.csv.gz", "edge.csv.gz", "node-label.csv.gz"):
        if not os.path.exists(os.path.join(raw, f)):
            sys.exit(f"pyg_models.py: {raw}/{f} is missing (expected OGB's raw layout)")
    x = torch.from_numpy(read_csv(os.path.join(raw, "node-feat.csv.gz"), np.float32))
    if x.dim() == 1:
        x = x[:, None]
    edges = torch.from_numpy(read_csv(os.path.join(raw, "edge.csv.gz"), np.int64).reshape(-1, 2).T.copy())
    y = torch.from_numpy(read_csv(os.path.join(raw, "node-label.csv.gz"), np.float64).reshape(-1)).long()
    n = x.shape[0]
    edge_index = to_undirected(edges, num_nodes=n)
    if normalize:
        x = x / x.sum(1, keepdim=True).clamp(min=1e-12)  # rows summing to 0 stay 0
    masks = {}
    for name in ("train", "valid", "test"):
        path = os.path.join(folder, "split", split, f"{name}.csv.gz")
        if not os.path.exists(path):
            sys.exit(f"pyg_models.py: split file {path} is missing")
        idx = torch.from_numpy(read_csv(path, np.int64).reshape(-1))
        masks[name] = torch.zeros(n, dtype=torch.bool)
        masks[name][idx] = True
    return x, edge_index, y, masks


class NGCFConv(MessagePassing):
    """pyg_baseline.py's NGCFConv with aggregation mean and a single bias."""

    def __init__(self, fin, fout, slope=0.2):
        super().__init__(aggr="mean")
        self.w1 = torch.nn.Linear(fin, fout)
        self.w2 = torch.nn.Linear(fin, fout, bias=False)
        self.slope = slope

    def forward(self, x, edge_index):
        agg = self.propagate(edge_index, x=(x, x))
        side, inter = agg.chunk(2, dim=-1)
        return Fn.leaky_relu(self.w1(side + x) + self.w2(inter), self.slope)

    def message(self, x_i, x_j):
        return torch.cat([x_j, x_i * x_j], dim=-1)


class Net(torch.nn.Module):
    def __init__(self, kind, fin, classes):
        super().__init__()
        hid, self.p, _, _ = HPARAMS[kind]
        self.kind = kind
        if kind == "gcn":
            self.convs = torch.nn.ModuleList([GCNConv(fin, hid), GCNConv(hid, classes)])
        elif kind.startswith("sage"):
            aggr = kind.split("-")[1] if "-" in kind else "mean"
            self.convs = torch.nn.ModuleList([SAGEConv(fin, hid, aggr=aggr), SAGEConv(hid, classes, aggr=aggr)])
        elif kind == "ngcf":
            self.convs = torch.nn.ModuleList([NGCFConv(fin, hid), NGCFConv(hid, classes)])
        elif kind == "gin":
            mlp = lambda a, b: torch.nn.Sequential(torch.nn.Linear(a, hid), torch.nn.ReLU(), torch.nn.Linear(hid, b))
            self.convs = torch.nn.ModuleList([GINConv(mlp(fin, hid), eps=0.0, train_eps=False),
                                              GINConv(mlp(hid, classes), eps=0.0, train_eps=False)])
        elif kind == "gat":
            heads = 8
            self.convs = torch.nn.ModuleList([
                GATConv(fin, hid, heads=heads, negative_slope=0.2, dropout=0.6, add_self_loops=True),
                GATConv(hid * heads, classes, heads=1, concat=False, negative_slope=0.2, dropout=0.6,
                        add_self_loops=True)])
        else:
            raise ValueError(kind)

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = Fn.dropout(x, self.p, self.training)
            x = conv(x, edge_index)
            if i + 1 < len(self.convs):
                if self.kind in ("gin", "gcn") or self.kind.startswith("sage"):
                    x = Fn.relu(x)
                elif self.kind == "gat":
                    x = Fn.elu(x)
                # ngcf: the LeakyReLU is inside the layer (every layer)
        return x


def load_graphtensor_weights(model, kind, path):
    """Copies a GraphTensor model file's /params into `model` (GIN only: layer<i>.mlp<j>.weight is
    [in, out], feature rows padded with zeros past the dataset's width; torch.nn.Linear is
    [out, in])."""
    import h5py
    if kind != "gin":
        sys.exit(f"pyg_models.py: --init-from maps GIN's weights only, not {kind}'s")
    with h5py.File(path, "r") as f:
        if "params" not in f:
            sys.exit(f"pyg_models.py: {path} has no /params group (not a GraphTensor model file)")
        params = f["params"]
        for i, conv in enumerate(model.convs):
            for j, lin in ((0, conv.nn[0]), (1, conv.nn[2])):
                for what in ("weight", "bias"):
                    name = f"layer{i}.mlp{j}.{what}"
                    if name not in params:
                        sys.exit(f"pyg_models.py: {path} has no params/{name}")
                    t = torch.from_numpy(np.asarray(params[name], dtype=np.float32))
                    dst = getattr(lin, what)
                    if what == "weight":
                        if t.shape[0] < dst.shape[1] or t.shape[1] != dst.shape[0]:
                            sys.exit(f"pyg_models.py: {path}: params/{name} is {tuple(t.shape)}, "
                                     f"expected [>= {dst.shape[1]}, {dst.shape[0]}]")
                        t = t[: dst.shape[1]].T
                    elif t.shape != dst.shape:
                        sys.exit(f"pyg_models.py: {path}: params/{name} is {tuple(t.shape)}, expected {tuple(dst.shape)}")
                    with torch.no_grad():
                        dst.copy_(t)


def run(kind, data, seed, epochs, dev, init_from=None, dropout=None, trace=None):
    x, edge_index, y, masks = data
    torch.manual_seed(seed)
    np.random.seed(seed)
    model = Net(kind, x.shape[1], int(y.max()) + 1).to(dev)
    if init_from:
        load_graphtensor_weights(model, kind, init_from)
    if dropout is not None:
        model.p = dropout
    _, _, lr, wd = HPARAMS[kind]
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)
    best_val, test_at_best = -1.0, 0.0
    for epoch in range(1, epochs + 1):
        model.train()
        opt.zero_grad(set_to_none=True)
        out = model(x, edge_index)
        loss = Fn.cross_entropy(out[masks["train"]], y[masks["train"]])
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(x, edge_index).argmax(1)
        acc = {k: (pred[m] == y[m]).float().mean().item() for k, m in masks.items()}
        if acc["valid"] > best_val:
            best_val, test_at_best = acc["valid"], acc["test"]
        if trace is not None:
            trace.write(json.dumps({"epoch": epoch, "loss": loss.item(), "valid": acc["valid"], "test": acc["test"]}) + "\n")
    return best_val, test_at_best


def time_step(kind, data, dev, iters=30, warmup=5):
    """Median ms of one full-batch training step, and the peak GPU memory (MiB) around it."""
    x, edge_index, y, masks = data
    torch.manual_seed(0)
    model = Net(kind, x.shape[1], int(y.max()) + 1).to(dev)
    _, _, lr, wd = HPARAMS[kind]
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)
    model.train()
    train = masks["train"]

    def step():
        opt.zero_grad(set_to_none=True)
        Fn.cross_entropy(model(x, edge_index)[train], y[train]).backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), torch.cuda.max_memory_allocated() / 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data_dir")
    ap.add_argument("--models", default="ngcf,gin,gat")
    ap.add_argument("--split", default=None, help="split folder (default: the only one, or planetoid)")
    ap.add_argument("--normalize", choices=("row", "none"), default="row")
    ap.add_argument("--time", action="store_true", help="also time one full-batch training step per model")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--json")
    ap.add_argument("--init-from", help="start from a GraphTensor model file's weights (GIN)")
    ap.add_argument("--dropout", type=float, help="override the models' dropout (0 for a matched run)")
    ap.add_argument("--trace", help="write seed 0's per-epoch loss and accuracies here (JSON lines)")
    args = ap.parse_args()
    kinds = [k for k in args.models.split(",") if k]
    for k in kinds:
        if k not in HPARAMS:
            sys.exit(f"pyg_models.py: unknown model '{k}' (choose from {', '.join(HPARAMS)})")
    if (args.trace or args.init_from) and len(kinds) != 1:
        sys.exit("pyg_models.py: --trace and --init-from take one model (--models gin)")
    if not torch.cuda.is_available():
        sys.exit("pyg_models.py: needs a CUDA GPU")
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    t0 = time.time()
    split = args.split
    if split is None:
        names = sorted(os.listdir(os.path.join(args.data_dir, "split"))) if os.path.isdir(
            os.path.join(args.data_dir, "split")) else []
        split = names[0] if len(names) == 1 else "planetoid"
    x, edge_index, y, masks = load(args.data_dir, split, args.normalize == "row")
    print(f"loaded {args.data_dir}: {x.shape[0]} nodes, {edge_index.shape[1]} directed edges, F={x.shape[1]}, "
          f"{int(y.max()) + 1} classes, split sizes " + ", ".join(f"{k} {int(m.sum())}" for k, m in masks.items())
          + f" ({time.time() - t0:.1f} s)")
    data = (x.to(dev), edge_index.to(dev), y.to(dev), {k: m.to(dev) for k, m in masks.items()})
    import torch_geometric
    results = {"torch": torch.__version__, "pyg": torch_geometric.__version__,
               "device": torch.cuda.get_device_name(), "models": {}}
    for kind in kinds:
        tests = []
        t0 = time.time()
        for seed in range(args.seeds):
            trace = open(args.trace, "w") if args.trace and seed == 0 else None
            val, test = run(kind, data, seed, args.epochs, dev, args.init_from, args.dropout, trace)
            if trace is not None:
                trace.close()
            tests.append(test)
            print(f"{kind} seed {seed}: valid {val:.4f} test {test:.4f}")
        mean = statistics.mean(tests)
        print(f"{kind}: PyG mean test accuracy over {args.seeds} seeds {mean:.4f} ({time.time() - t0:.1f} s)")
        results["models"][kind] = {"mean_test": mean, "tests": tests}
        if args.time:
            ms, peak = time_step(kind, data, dev)
            print(f"{kind}: PyG full-batch training step {ms:.3f} ms, peak {peak:.1f} MiB")
            results["models"][kind].update(step_ms=ms, peak_mib=peak)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
