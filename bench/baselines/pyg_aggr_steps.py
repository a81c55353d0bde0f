#!/usr/bin/env python3
"""PyG's training step with a sum or a max aggregation, on pyg_baseline.py's sampled-block shapes:
the reference for `gt-bench step --aggregation sum|max` (GraphTensor's model.aggregation).

pyg_baseline.py (shared/bench) times GCN and GraphSAGE with the mean only. This script loads that
file as a module and runs its own workloads, step and timing (run_workload: the same blocks,
features, Adam, median of CUDA-event timings) with the models' SAGEConv built with aggr=sum or
aggr=max instead (GCN: root_weight=False, as there). Nothing of the step is written again here.

  python3 bench/baselines/pyg_aggr_steps.py PATH/TO/pyg_baseline.py [--aggr sum,max]
                                    [--model gcn,sage] [--workload NAME]... [--json FILE]

The JSON is pyg_baseline.py's ("steps": one record per workload and model) with "aggregation"
added to each record; bench/baselines/bench_compare.py reads it beside gt-bench step's JSON.
"""
import argparse, importlib.util, json, math, sys


def load_baseline(path):
    spec = importlib.util.spec_from_file_location("pyg_baseline", path)
    if spec is None or spec.loader is None:
        sys.exit(f"pyg_aggr_steps.py: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("baseline", help="shared/bench/pyg_baseline.py (or a copy of it)")
    ap.add_argument("--aggr", default="sum,max")
    ap.add_argument("--model", default="gcn,sage")
    ap.add_argument("--workload", action="append")
    ap.add_argument("--json")
    args = ap.parse_args()
    pb = load_baseline(args.baseline)
    import torch
    from torch_geometric.nn import SAGEConv
    aggrs = [a for a in args.aggr.split(",") if a]
    models = [m for m in args.model.split(",") if m]
    for a in aggrs:
        if a not in ("mean", "sum", "max"):
            sys.exit(f"pyg_aggr_steps.py: unknown aggregation '{a}' (mean, sum or max)")
    for m in models:
        if m not in ("gcn", "sage"):
            sys.exit(f"pyg_aggr_steps.py: unknown model '{m}' (gcn or sage)")
    workloads = args.workload or list(pb.WORKLOADS)
    for w in workloads:
        if w not in pb.WORKLOADS:
            sys.exit(f"pyg_aggr_steps.py: unknown workload '{w}' ({', '.join(pb.WORKLOADS)})")
    if not torch.cuda.is_available():
        sys.exit("pyg_aggr_steps.py: needs a CUDA GPU")
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    import torch_geometric
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "pyg": torch_geometric.__version__,
              "tf32": False, "steps": []}
    for aggr in aggrs:
        # run_workload calls the module's build(model, dims): the same layers with this aggr.
        def build(model, dims, aggr=aggr):
            return torch.nn.ModuleList(SAGEConv(fin, fout, aggr=aggr, root_weight=(model == "sage"))
                                       for fin, fout in zip(dims[:-1], dims[1:]))
        pb.build = build
        for w in workloads:
            for m in models:
                try:
                    r = pb.run_workload(w, m, dev, gen)
                except torch.cuda.OutOfMemoryError:
                    r = dict(workload=w, model=m, step_ms=math.nan, peak_mib=math.nan, error="OOM")
                r["aggregation"] = aggr
                result["steps"].append(r)
                print(f"{w:12s} {m:5s} aggr={aggr:4s} step {r['step_ms']:8.3f} ms  peak {r['peak_mib']:8.1f} MiB")
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
