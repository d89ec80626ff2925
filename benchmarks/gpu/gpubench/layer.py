"""One transformer layer of a named model shape, timed in its two parts the
cost model prices apart: attention (a x tiles) and the token-linear layers
(b x tokens). HYBRID.md section 3 derives h100_7b's tile_seconds and
token_seconds from flop counts and assumed efficiencies; this measures them.

attention: one causal document of L tokens through
torch.nn.functional.scaled_dot_product_attention, forward + backward, per
backend (flash, cudnn, efficient, whatever the installed torch offers),
heads and K/V heads as the model has them. A causal document of n = L / B
blocks has n (n + 1) / 2 tiles; the fit t = a x tiles + c gives a per layer.
A second series holds the queries at one block-aligned length and grows the
keys without a mask (the remote key blocks of a context-parallel member): if
a tile costs what the model says, its slope equals the causal one.

linear: the layer's token-linear work on L tokens, forward + backward with
weight gradients (two RMS norms, Q/K/V in, output out, gated MLP up and down,
the residual adds); t = b x L + c.

Per layer, then x layers: the profile's tile_seconds and token_seconds, and
rho = tile_seconds / (B x token_seconds), the one ratio the schedulers'
speed-ups depend on (HYBRID.md section 3).
"""

import math
import statistics
import time

from .model import least_squares

SHAPE_7B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
            "ffn": 14336, "block": 128}

# h100_7b and h100_7b_fa3 as bundled (HYBRID.md section 3), for comparison.
ASSUMED = {"h100_7b": {"tile_seconds": 7.5e-5, "token_seconds": 9.7e-5},
           "h100_7b_fa3": {"tile_seconds": 5.0e-5, "token_seconds": 9.7e-5}}


def causal_tiles(length, block):
    """Tiles of one causal document on one rank: n (n + 1) / 2 over its
    ceil(L / B) blocks."""
    n = -(-length // block)
    return n * (n + 1) // 2


def rect_tiles(queries, keys, block):
    return (-(-queries // block)) * (-(-keys // block))


def backends(torch):
    """{name: SDPBackend or None} of what this torch offers; None stands for
    the reference math where SDPA itself is missing (torch < 2.0)."""
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        return {"math": None}
    found = {}
    for name, attr in (("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"),
                       ("efficient", "EFFICIENT_ATTENTION"), ("math", "MATH")):
        if hasattr(SDPBackend, attr):
            found[name] = getattr(SDPBackend, attr)
    return found


def _reference_attention(torch, q, k, v, causal):
    """Plain attention with grouped K/V heads repeated (the CPU stand-in)."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        lq, lk = q.shape[2], k.shape[2]
        mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(lk - lq)
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def attention_call(torch, backend, causal):
    """A callable (q, k, v) -> out running one backend, grouped K/V heads
    passed as they are (enable_gqa) where the torch takes it."""
    if backend is None:
        return lambda q, k, v: _reference_attention(torch, q, k, v, causal)
    from torch.nn.attention import sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    state = {"gqa": True}  # enable_gqa came in torch 2.5; older ones repeat K/V

    def run(q, k, v):
        with sdpa_kernel([backend]):
            if state["gqa"]:
                try:
                    return sdpa(q, k, v, is_causal=causal, enable_gqa=True)
                except (TypeError, RuntimeError):  # older torch; a backend without GQA
                    state["gqa"] = False
            groups = q.shape[1] // k.shape[1]
            return sdpa(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                        is_causal=causal)
    run.state = state
    return run


class Timer:
    """fwd and bwd times in ms of a callable building a graph from leaves:
    CUDA events on a GPU, the process clock elsewhere; median of `reps`
    after `warmup`."""

    def __init__(self, torch, device, reps, warmup):
        self.torch, self.device, self.reps, self.warmup = torch, device, reps, warmup

    def _now(self):
        if self.device == "cuda":
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _ms(self, start, end):
        if self.device == "cuda":
            self.torch.cuda.synchronize()
            return start.elapsed_time(end)
        return (end - start) * 1e3

    def time(self, forward, leaves):
        fwd, bwd = [], []
        for i in range(self.warmup + self.reps):
            for leaf in leaves:
                leaf.grad = None
            t0 = self._now()
            out = forward()
            t1 = self._now()
            out.backward(self.torch.ones_like(out))
            t2 = self._now()
            if i >= self.warmup:
                fwd.append(self._ms(t0, t1))
                bwd.append(self._ms(t1, t2))
        return statistics.median(fwd), statistics.median(bwd)


def time_attention(torch, timer, shape, backend_name, backend, queries, keys, causal, dtype):
    """One attention record, or one with "error" when the backend refuses the
    shape (it names why)."""
    dev = timer.device
    g = torch.Generator(device=dev).manual_seed(queries + 7 * keys)
    make = lambda heads, length: torch.randn(  # noqa: E731
        1, heads, length, shape["head_dim"], device=dev, dtype=dtype, generator=g
    ).requires_grad_()
    q = make(shape["heads"], queries)
    k, v = make(shape["kv_heads"], keys), make(shape["kv_heads"], keys)
    call = attention_call(torch, backend, causal)
    record = {"part": "attention", "backend": backend_name, "causal": causal, "queries": queries,
              "keys": keys,
              "tiles": causal_tiles(queries, shape["block"]) if causal
              else rect_tiles(queries, keys, shape["block"])}
    try:
        record["fwd_ms"], record["bwd_ms"] = timer.time(lambda: call(q, k, v), (q, k, v))
        record["kv_repeated"] = not getattr(call, "state", {"gqa": False})["gqa"]
    except RuntimeError as error:
        record["error"] = str(error).splitlines()[0][:200]
    return record


def time_packed(torch, timer, shape, row_tokens, doc_tokens, dtype):
    """One packed row of equal causal documents through PyTorch's varlen
    kernel (flash), forward + backward: how a row of short documents costs
    against its tiles. K/V heads are repeated to the query heads where the
    kernel does not take them grouped."""
    from .kernels import varlen_entry
    if doc_tokens < 1 or row_tokens % doc_tokens:
        raise ValueError(f"a packed row of {row_tokens} tokens does not hold documents of "
                         f"{doc_tokens}; give a divisor")
    record = {"part": "packed", "backend": "varlen", "row": row_tokens, "doc": doc_tokens,
              "docs": row_tokens // doc_tokens,
              "tiles": (row_tokens // doc_tokens) * causal_tiles(doc_tokens, shape["block"])}
    call = varlen_entry()
    if call is None:
        record["error"] = "this torch has no torch.nn.attention.varlen"
        return record
    dev = timer.device
    g = torch.Generator(device=dev).manual_seed(row_tokens + doc_tokens)
    make = lambda heads: torch.randn(  # noqa: E731
        row_tokens, heads, shape["head_dim"], device=dev, dtype=dtype, generator=g
    ).requires_grad_()
    q, k, v = make(shape["heads"]), make(shape["kv_heads"]), make(shape["kv_heads"])
    cu = torch.arange(0, row_tokens + 1, doc_tokens, device=dev, dtype=torch.int32)
    groups = shape["heads"] // shape["kv_heads"]

    def run(repeat):
        kk = k.repeat_interleave(groups, 1) if repeat else k
        vv = v.repeat_interleave(groups, 1) if repeat else v
        return call(q, kk, vv, cu, cu, doc_tokens, doc_tokens)
    for repeat in (False, True):
        try:
            record["fwd_ms"], record["bwd_ms"] = timer.time(lambda: run(repeat), (q, k, v))
            record["kv_repeated"] = repeat
            record.pop("error", None)
            break
        except RuntimeError as error:
            record["error"] = str(error).splitlines()[0][:200]
    return record


def time_linear(torch, timer, shape, tokens, dtype):
    """The layer's token-linear work on `tokens` tokens, forward + backward:
    RMS norm, Q/K/V in, output out, residual, RMS norm, gated MLP up and
    down, residual (attention itself and rotary embedding left out)."""
    dev, h = timer.device, shape["hidden"]
    g = torch.Generator(device=dev).manual_seed(tokens)
    qkv_out = h + 2 * shape["kv_heads"] * shape["head_dim"]

    def param(rows, cols):
        return (torch.randn(rows, cols, device=dev, dtype=dtype, generator=g) /
                math.sqrt(rows)).requires_grad_()
    w_qkv, w_o = param(h, qkv_out), param(h, h)
    w_up, w_down = param(h, 2 * shape["ffn"]), param(shape["ffn"], h)
    n1, n2 = (torch.ones(h, device=dev, dtype=dtype).requires_grad_() for _ in range(2))
    x = torch.randn(tokens, h, device=dev, dtype=dtype, generator=g).requires_grad_()

    def rms(t, w):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def forward():
        attn_out = (rms(x, n1) @ w_qkv)[:, :h]  # stands for the attention output's shape
        x2 = x + attn_out @ w_o
        gate, up = (rms(x2, n2) @ w_up).chunk(2, dim=-1)
        return x2 + (torch.nn.functional.silu(gate) * up) @ w_down
    fwd, bwd = timer.time(forward, (x, w_qkv, w_o, w_up, w_down, n1, n2))
    return {"part": "linear", "tokens": tokens, "fwd_ms": fwd, "bwd_ms": bwd}


def fit_line(xs, records):
    """t = slope x x + const over fwd + bwd ms; with the largest relative
    error of the fit over the points."""
    ys = [r["fwd_ms"] + r["bwd_ms"] for r in records]
    if len(ys) < 2:
        return {"slope_ms": math.nan, "const_ms": math.nan, "points": len(ys),
                "largest_error": math.nan}
    slope, const = least_squares([xs, [1.0] * len(xs)], ys)
    worst = max(abs(slope * x + const - y) / y for x, y in zip(xs, ys))
    return {"slope_ms": float(slope), "const_ms": float(const), "points": len(ys),
            "largest_error": float(worst)}


def summarise(records, shape):
    """Fits per attention backend (causal and unmasked) and for the linear
    part; the profile figures x layers; rho per backend."""
    ok = [r for r in records if "error" not in r and not r.get("short")]
    linear = [r for r in ok if r["part"] == "linear"]
    lin = fit_line([r["tokens"] for r in linear], linear)
    token_seconds = lin["slope_ms"] * 1e-3 * shape["layers"]
    out = {"shape": shape, "linear": lin, "token_seconds": token_seconds, "attention": {}}
    for name in sorted({r["backend"] for r in ok if r["part"] == "attention"}):
        entry = {}
        for causal in (True, False):
            rs = [r for r in ok if r["part"] == "attention" and r["backend"] == name
                  and r["causal"] == causal]
            entry["causal" if causal else "unmasked"] = fit_line([r["tiles"] for r in rs], rs)
        tile_seconds = entry["causal"]["slope_ms"] * 1e-3 * shape["layers"]
        entry["tile_seconds"] = tile_seconds
        entry["rho"] = tile_seconds / (shape["block"] * token_seconds) if token_seconds > 0 \
            else math.nan
        # Forward QK^T and PV: 4 B^2 d flops per head and tile; backward 2.5x that.
        flops = 3.5 * 4 * shape["block"] ** 2 * shape["head_dim"] * shape["heads"]
        slope = entry["causal"]["slope_ms"]
        entry["tflops"] = flops / (slope * 1e-3) / 1e12 if slope > 0 else math.nan
        out["attention"][name] = entry
    packed = [r for r in ok if r["part"] == "packed"]
    slope = out["attention"].get("flash", {}).get("causal", {}).get("slope_ms", math.nan)
    out["packed"] = [{"doc": r["doc"], "docs": r["docs"], "ms": r["fwd_ms"] + r["bwd_ms"],
                      "over_tile_model": (r["fwd_ms"] + r["bwd_ms"]) / (slope * r["tiles"])}
                     for r in packed]
    out["short"] = [short_entry(r, out) for r in records if r.get("short") and "error" not in r]
    return out


def short_entry(record, fits):
    """A short row against the fitted slope alone: what a layer spends on it
    beyond slope x tiles (or tokens), in ms."""
    ms = record["fwd_ms"] + record["bwd_ms"]
    if record["part"] == "linear":
        size, slope = record["tokens"], fits["linear"]["slope_ms"]
    else:
        size = record["tiles"]
        slope = fits["attention"].get(record["backend"], {}).get("causal", {}).get("slope_ms",
                                                                                  math.nan)
    name = "linear" if record["part"] == "linear" else record["backend"]
    return {"kind": name, "tokens": record.get("tokens", record.get("queries")), "ms": ms,
            "beyond_slope_ms": ms - slope * size}
