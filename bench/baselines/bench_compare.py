#!/usr/bin/env python3
"""GraphTensor against PyTorch Geometric: ratio tables in Markdown from the two benchmarks' JSON.

  python3 bench/baselines/bench_compare.py --gt KERNELS.jsonl STEP.jsonl [STEP-TF32.jsonl] \\
                                   --pyg PYG.json [PYG-TF32.json]

--gt  files written by `gt-bench kernels --json` and `gt-bench step [--tf32] --json` (JSON lines,
      one record per measurement, "bench": ceiling | kernels | step).
--pyg files written by shared/bench/pyg_baseline.py --json (one JSON object; "tf32" says which
      run it is; "spmm" holds cuSPARSE's aggregation times, "steps" the training steps), and by
      bench/baselines/pyg_aggr_steps.py (steps with a sum or a max aggregation, matched to
      `gt-bench step --aggregation` by each record's "aggregation").

Tables: (1) Pull forward (sum and mean) against torch.sparse.mm (cuSPARSE SpMM) on each
workload's large block; (2) one training step per model and workload, with its memory: ours is
what the caching allocator holds (reserved), PyG's is torch.cuda.max_memory_allocated. A ratio
> 1 means GraphTensor is faster (time) or smaller (memory). Uses only the standard library.
"""
import argparse, json, math, sys


def read_gt(paths):
    recs = []
    for p in paths:
        with open(p) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"bench_compare.py: {p}:{n}: not JSON lines ({e})")
    return recs


def read_pyg(paths):
    out = []
    for p in paths:
        with open(p) as f:
            try:
                out.append(json.load(f))
            except json.JSONDecodeError as e:
                sys.exit(f"bench_compare.py: {p}: not a pyg_baseline.py JSON file ({e})")
    return out


def fmt(v, digits=3):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:.{digits}f}"


def ratio(a, b):
    if a is None or b is None or a == 0 or any(isinstance(v, float) and math.isnan(v) for v in (a, b)):
        return "n/a"
    return f"{b / a:.2f}x"


def kernels_table(gt, pygs):
    kern = [r for r in gt if r.get("bench") == "kernels"]
    if not kern:
        return
    spmm = {}
    for p in pygs:
        for r in p.get("spmm", []):
            spmm.setdefault(r["workload"], r)
    ceil_gt = next((r["d2d_copy_GBps"] for r in gt if r.get("bench") == "ceiling"), None)
    ceil_pyg = next((p["ceilings"]["d2d_copy_GBps"] for p in pygs if "ceilings" in p), None)
    launch = next((r for r in gt if r.get("bench") == "ceiling" and "launch_ms" in r), None)
    print("### Aggregation: Pull (GraphTensor) against cuSPARSE SpMM (torch.sparse.mm), large block\n")
    print(f"D2D copy: {fmt(ceil_gt, 1)} GB/s measured by gt-bench, {fmt(ceil_pyg, 1)} GB/s by pyg_baseline.py. "
          "GB/s count each op's fewest bytes (gt-bench: distinct source rows once; pyg_baseline: "
          "min(n_src, nnz) rows), so compare times.\n")
    print("Times are of calls timed one at a time (as pyg_baseline.py times cuSPARSE); \"queued\" is the "
          "mean of 20 calls queued back to back (the GPU's time alone). \"plan\": the edge order made with "
          "the block's upload (Block::pull_plan), where the forward Pull reads one, and the Pull without it.\n")
    if launch:
        print(f"Launch floor (gt::relu_forward on 32 floats, timed the same two ways): {fmt(launch['launch_ms'], 4)} ms "
              f"a call, {fmt(launch['launch_queued_ms'], 4)} ms queued.\n")
    print("| workload | F | cuSPARSE sum ms | Pull sum ms | speed-up | Pull mean ms | speed-up | "
          "Pull sum GB/s | of D2D copy | of copy, queued | Pull sum bwd ms | Pull mean bwd ms | plan ms | "
          "Pull sum ms, no plan |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    by = {(r["workload"], r["op"]): r for r in kern}
    for w in dict.fromkeys(r["workload"] for r in kern):
        s = by.get((w, "pull_sum_fwd"), {})
        m = by.get((w, "pull_mean_fwd"), {})
        sb = by.get((w, "pull_sum_bwd"), {})
        mb = by.get((w, "pull_mean_bwd"), {})
        pl = by.get((w, "pull_plan (upload)"), {})
        un = by.get((w, "pull_sum_fwd (unplanned)"), {})
        ref = spmm.get(w, {}).get("ms")
        print(f"| {w} | {s.get('feature_dim', '')} | {fmt(ref)} | {fmt(s.get('ms'))} | {ratio(s.get('ms'), ref)} | "
              f"{fmt(m.get('ms'))} | {ratio(m.get('ms'), ref)} | {fmt(s.get('GBps_floor'), 1)} | "
              f"{fmt(100 * s['of_d2d_copy'] if 'of_d2d_copy' in s else None, 0)}% | "
              f"{fmt(100 * s['queued_of_d2d_copy'] if 'queued_of_d2d_copy' in s else None, 0)}% | "
              f"{fmt(sb.get('ms'))} | {fmt(mb.get('ms'))} | {fmt(pl.get('ms'))} | {fmt(un.get('ms'))} |")
    print()


def steps_table(gt, pygs):
    steps = [r for r in gt if r.get("bench") == "step"]
    if not steps:
        return
    pyg = {}
    for p in pygs:
        for r in p.get("steps", []):
            # pyg_baseline.py's records are the mean; pyg_aggr_steps.py's name theirs.
            pyg[(r["workload"], r["model"], bool(p.get("tf32", False)), r.get("aggregation", "mean"))] = r
    for tf32 in (False, True):
        rows = [r for r in steps if bool(r.get("tf32", 0)) == tf32]
        if not rows:
            continue
        print(f"### One training step (forward, loss, backward, Adam), {'TF32' if tf32 else 'float32'} dense math\n")
        print("| workload | model | PyG ms | GraphTensor ms | speed-up | PyG peak MiB | GraphTensor reserved MiB | "
              "memory ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            aggr = r.get("aggregation", "mean")
            p = pyg.get((r["workload"], r["model"], tf32, aggr), {})
            ours, theirs = r.get("step_ms"), p.get("step_ms")
            mem, pmem = r.get("reserved_mib"), p.get("peak_mib")
            note = f" ({r['error']})" if "error" in r else (f" (PyG {p['error']})" if "error" in p else "")
            model = r["model"] if aggr == "mean" else f"{r['model']} ({aggr})"
            print(f"| {r['workload']} | {model}{note} | {fmt(theirs)} | {fmt(ours)} | {ratio(ours, theirs)} | "
                  f"{fmt(pmem, 1)} | {fmt(mem, 1)} | {ratio(mem, pmem)} |")
        ngcf = [(r, pyg.get((r["workload"], "ngcf", tf32, "mean"), {})) for r in rows
                if r["model"] == "ngcf" and r.get("aggregation", "mean") == "mean"]
        if ngcf:
            print("\nNGCF memory (PyG materialises the E x 2F messages; the fused kernel never does): " +
                  ", ".join(f"{r['workload']} {ratio(r.get('reserved_mib'), p.get('peak_mib'))} smaller"
                            for r, p in ngcf))
        print()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gt", nargs="+", required=True, help="gt-bench --json files")
    ap.add_argument("--pyg", nargs="+", required=True, help="pyg_baseline.py --json files")
    args = ap.parse_args()
    gt, pygs = read_gt(args.gt), read_pyg(args.pyg)
    dev = next((r.get("device") for r in gt if r.get("device")), "?")
    print(f"GraphTensor on {dev}; PyG {pygs[0].get('pyg', '?')} / torch {pygs[0].get('torch', '?')} on "
          f"{pygs[0].get('device', '?')}\n")
    kernels_table(gt, pygs)
    steps_table(gt, pygs)


if __name__ == "__main__":
    main()
