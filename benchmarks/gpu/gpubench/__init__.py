"""fulcrum's GPU benchmark harness: rows, plans, per-rank masks, kernels, the
tile model against measured times, and the cost-profile fit (benchmarks/gpu/run.py)."""
