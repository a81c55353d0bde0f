"""Would a row stride padded to 16 bytes pay? Times cuSPARSE SpMM (torch.sparse.mm) on
pyg_baseline.py's large blocks with rows of F floats and with rows padded to a multiple of 4,
and the cuBLAS products X W and X^T G (float32 and TF32) on contiguous X and on the padded
buffer's [:, :F] view. A development tool for the GPU machine (docs/benchmarks.md, sixth
session): cuSPARSE gains from padding as much as Pull does, so padding does not change their
ratio; see also scripts/pull_sweep.cu WORKLOAD F.

    python3 scripts/pad_probe.py PATH/TO/pyg_baseline.py
"""
import importlib.util
import sys

import torch


def main():
    spec = importlib.util.spec_from_file_location("pyg_baseline", sys.argv[1] if len(sys.argv) > 1 else "pyg_baseline.py")
    pb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pb)
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    print(torch.cuda.get_device_name())
    for name in ["reddit2", "wiki-talk", "livejournal"]:
        F, hid, _, shape = pb.WORKLOADS[name]
        s, d, e = shape[0]
        Fp = (F + 3) // 4 * 4
        b = pb.random_block(s, d, e, gen, dev)
        A = torch.sparse_csr_tensor(b["indptr"], b["indices"], torch.ones(b["indices"].numel(), device=dev), size=(d, s))
        x = torch.randn(s, F, device=dev)
        xp = torch.zeros(s, Fp, device=dev)
        xp[:, :F] = x
        xv = xp[:, :F]
        r = {"spmm F": pb.median_ms(lambda: torch.sparse.mm(A, x)),
             "spmm Fpad": pb.median_ms(lambda: torch.sparse.mm(A, xp))}
        for m in (8, 16, 32):
            xm = torch.zeros(s, (F + m - 1) // m * m, device=dev)
            xm[:, :F] = x
            r[f"spmm pad{m}"] = pb.median_ms(lambda: torch.sparse.mm(A, xm))
            del xm
        W = torch.randn(F, hid, device=dev)
        G = torch.randn(s, hid, device=dev)
        for tf in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf
            t = "tf32" if tf else "fp32"
            r[f"{t} XW"] = pb.median_ms(lambda: x @ W)
            r[f"{t} XW padded"] = pb.median_ms(lambda: xv @ W)
            r[f"{t} XtG"] = pb.median_ms(lambda: x.t() @ G)
            r[f"{t} XtG padded"] = pb.median_ms(lambda: xv.t() @ G)
        torch.backends.cuda.matmul.allow_tf32 = False
        print(name, F, Fp, " ".join(f"{k}={v:.3f}" for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
