"""Does a register-resident GDN forward state scan compile for sm_90 without spills?

An experiment for the Gated DeltaNet redesign (docs/kernels/gdn.md, "Register-resident scan:
offline resources"). The shipped ``_state_fwd_kernel`` (kernels/gdn/chunk_fwd.py) stages the
chunk state through global memory and reduces over at most 32 columns per dot, because IEEE
fp32 ``tl.dot`` with an operand in registers spilled on sm_90. The prototypes here keep the
state tile h [K, BV] (fp32) in registers across the whole chunk loop, one program per
(batch * head, V tile), and compute per chunk (same recurrence as ``_state_fwd_kernel`` and
``_state_update``; W, U from the shipped ``_wy_fwd_kernel``/``_wy_apply_fwd_kernel``):

    store h (the state entering the chunk);  Vn = U - W h;  store Vn
    h = exp(G_L) h + K^T (diag(exp(G_L - G)) Vn)

Variants: dot precision DOT in {"ieee", "tf32", "tf32x3", "bf16"} ("bf16" casts both dot
operands to bf16: not accurate here, since W, h and Vn are fp32 values, but the cheapest
tensor-core form, as a lower bound on resources), BV in {16, 32, 64}, num_warps in {4, 8},
and NK in {1, 2, 4}: the state kept as NK row tiles of K / NK rows in the same program
(smaller dots, the same registers for the state).

Modes (each independent):

``--check``   correctness under TRITON_INTERPRET=1 (set by this script): B=1, H=2, T=200
              (a ragged last chunk), K=V=32 and 64, against the shipped ``_state_fwd_kernel``
              on the same W, U and against a float64 torch loop of the recurrence. The
              interpreter computes dots in fp32 whatever the precision: this checks the
              algorithm, not TF32 rounding.
``--compile`` records one launch per variant under the interpreter (K=V=128, and K=V=64 as a
              check), compiles each offline for sm_90 (``kernelgate.sandbox.resources.
              compile_records``, against this file as the "candidate") with the installed
              Triton and with ``--triton36 DIR``; prints registers, spill bytes and shared
              memory, writes ``--out`` JSON.
``--time``    on a CUDA device (without the interpreter): times every variant given by
              ``--variants`` (default: those the compile JSON ``--from`` lists as spill-free
              under every Triton) against the shipped ``_state_fwd_kernel`` at B=2, H=16,
              K=V=128, T=4096 and 16384 (``triton.testing.do_bench``) and checks the states.

    PYTHONPATH=src python benchmarks/gdn_scan_registers.py --check --compile \
        --triton36 /tmp/tr36site --out benchmarks/results/gdn-scan-registers-cpu.json
    PYTHONPATH=src python benchmarks/gdn_scan_registers.py --time \
        --from benchmarks/results/gdn-scan-registers-cpu.json --out FILE

The kernels live in this script, not under src/: they are a measurement, not shipped code.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# The interpreter for --check/--compile, decided before Triton is imported. When
# compile_records imports this file as a candidate, __name__ is not "__main__": no interpreter.
if __name__ == "__main__" and "--time" not in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
try:
    import kernelgate  # noqa: F401
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, str(ROOT / "src"))

from kernelgate.kernels._common import round_up, tile_width  # noqa: E402
from kernelgate.kernels._tiles import batch_head, chunk_base  # noqa: E402
from kernelgate.kernels.gdn import chunk as gdn_chunk  # noqa: E402
from kernelgate.kernels.gdn.chunk_fwd import (  # noqa: E402
    _load_gate_cumsum,
    _state_fwd_kernel,
    _wy_apply_fwd_kernel,
    _wy_fwd_kernel,
)

CHUNK = gdn_chunk.CHUNK_SIZE
DOTS = ("tf32x3", "tf32", "bf16", "ieee")  # the likeliest candidates compile first
BLOCKS_V = (16, 32, 64)
WARPS = (4, 8)
SPLITS_K = (1, 2, 4)
# None: Triton's default (3 on sm_90), which software-pipelines the chunk loop's loads (W, K,
# U tiles) through shared memory; 1 and 2 buy shared memory back.
STAGES = (None, 2, 1)
# The most shared memory one CTA can have on sm_90 (227 KiB, opt-in dynamic shared memory);
# a kernel asking for more fails to launch ("out of resources"), whatever its registers.
SM90_MAX_SHARED = (
    232448  # as in _offline_compile, which this file (a compile candidate) cannot import here
)


@triton.jit
def _dot(a, b, DOT: tl.constexpr):
    """a @ b at precision DOT: a tl.dot input precision, or "bf16" (operands cast to bf16,
    fp32 accumulation: inexact for these fp32 operands, a resource lower bound)."""
    if DOT == "bf16":
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    else:
        return tl.dot(a, b, input_precision=DOT)


@triton.jit
def _w_times_h(w_base, h, o_c, o_k, m_t, H, K: tl.constexpr, DOT: tl.constexpr):
    """W[:, rows o_k] h for one state row tile (W loaded from memory, h in registers)."""
    b_w = tl.load(w_base + o_c[:, None] * (H * K) + o_k[None, :], mask=m_t[:, None], other=0.0)
    return _dot(b_w, h, DOT)


@triton.jit
def _update(k_base, h, b_d, decay, o_c, o_k, m_t, H, K: tl.constexpr, DOT: tl.constexpr):
    """decay h + K[:, rows o_k]^T b_d for one state row tile; the keys are loaded here, just
    before their dot, so they are not live across the Vn computation."""
    b_kt = tl.load(k_base + o_c[None, :] * (H * K) + o_k[:, None], mask=m_t[None, :], other=0.0).to(
        tl.float32
    )
    return h * decay + _dot(b_kt, b_d, DOT)


# T, NT, H runtime values (as in the shipped scan); K, V powers of two (a prototype: no masks
# on K or V beyond the V tile).
@triton.jit(do_not_specialize=["T", "NT", "H"])
def _scan_registers_kernel(
    k_ptr,
    w_ptr,
    u_ptr,
    gcum_ptr,
    h0_ptr,  # inputs (k in its dtype, W, U fp32, G fp64, h0 fp32)
    h_ptr,
    vn_ptr,
    ht_ptr,  # outputs (fp32): entering states [B, NT, H, K, V], Vn [B, T, H, V], final state
    T,
    NT,
    H,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BV: tl.constexpr,
    NK: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr,
    DOT: tl.constexpr,
):
    """The forward state scan of one (batch, head, V tile) with the state in registers: NK
    (1, 2 or 4) row tiles h_a, h_b, h_c, h_d of K / NK rows each (those past NK unused),
    carried through the chunk loop; per chunk the entering state and Vn are stored, nothing
    is re-read. Splitting the state keeps each dot's operands smaller."""
    BKS: tl.constexpr = K // NK
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    o_ka = tl.arange(0, BKS)
    o_kb = BKS + o_ka
    o_kc = 2 * BKS + o_ka
    o_kd = 3 * BKS + o_ka
    o_v = i_v * BV + tl.arange(0, BV)
    state0 = h0_ptr + i_bh.to(tl.int64) * K * V
    h_a = tl.zeros([BKS, BV], dtype=tl.float32)
    h_b = tl.zeros([BKS, BV], dtype=tl.float32)
    h_c = tl.zeros([BKS, BV], dtype=tl.float32)
    h_d = tl.zeros([BKS, BV], dtype=tl.float32)
    if HAS_H0:
        h_a += tl.load(state0 + o_ka[:, None] * V + o_v[None, :])
        if NK >= 2:
            h_b += tl.load(state0 + o_kb[:, None] * V + o_v[None, :])
        if NK == 4:
            h_c += tl.load(state0 + o_kc[:, None] * V + o_v[None, :])
            h_d += tl.load(state0 + o_kd[:, None] * V + o_v[None, :])
    for i_n in range(0, NT):
        m_t, chunk_row = chunk_base(i_b, i_h, i_n, T, H, C)
        h_base = h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V
        w_base = w_ptr + chunk_row * K
        k_base = k_ptr + chunk_row * K
        tl.store(h_base + o_ka[:, None] * V + o_v[None, :], h_a)
        wh = _w_times_h(w_base, h_a, o_c, o_ka, m_t, H, K, DOT)
        if NK >= 2:
            tl.store(h_base + o_kb[:, None] * V + o_v[None, :], h_b)
            wh += _w_times_h(w_base, h_b, o_c, o_kb, m_t, H, K, DOT)
        if NK == 4:
            tl.store(h_base + o_kc[:, None] * V + o_v[None, :], h_c)
            tl.store(h_base + o_kd[:, None] * V + o_v[None, :], h_d)
            wh += _w_times_h(w_base, h_c, o_c, o_kc, m_t, H, K, DOT)
            wh += _w_times_h(w_base, h_d, o_c, o_kd, m_t, H, K, DOT)
        off_v = o_c[:, None] * (H * V) + o_v[None, :]
        b_vn = tl.load(u_ptr + chunk_row * V + off_v, mask=m_t[:, None], other=0.0) - wh
        tl.store(vn_ptr + chunk_row * V + off_v, b_vn, mask=m_t[:, None])
        g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
        b_d = b_vn * tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0)[:, None]
        decay = tl.exp(g_last.to(tl.float32))
        h_a = _update(k_base, h_a, b_d, decay, o_c, o_ka, m_t, H, K, DOT)
        if NK >= 2:
            h_b = _update(k_base, h_b, b_d, decay, o_c, o_kb, m_t, H, K, DOT)
        if NK == 4:
            h_c = _update(k_base, h_c, b_d, decay, o_c, o_kc, m_t, H, K, DOT)
            h_d = _update(k_base, h_d, b_d, decay, o_c, o_kd, m_t, H, K, DOT)
    if STORE_HT:
        ht = ht_ptr + i_bh.to(tl.int64) * K * V
        tl.store(ht + o_ka[:, None] * V + o_v[None, :], h_a)
        if NK >= 2:
            tl.store(ht + o_kb[:, None] * V + o_v[None, :], h_b)
        if NK == 4:
            tl.store(ht + o_kc[:, None] * V + o_v[None, :], h_c)
            tl.store(ht + o_kd[:, None] * V + o_v[None, :], h_d)


# -- launches ------------------------------------------------------------------------------


def wy_inputs(k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor) -> dict:
    """G (fp64 cumulative gates), W and U of every chunk, made by the shipped kernels with
    the launches chunk.py's ``chunk_gated_delta_rule_fwd`` uses (which does not return U)."""
    batch, seq_len, heads, dim_k = k.shape
    dim_v = v.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK)
    prec = gdn_chunk._dot_precision(k.dtype)
    block_k, block_v = tile_width(dim_k, 64), tile_width(dim_v, 64)
    f32 = dict(device=k.device, dtype=torch.float32)
    g_cum = torch.empty(batch, seq_len, heads, device=k.device, dtype=torch.float64)
    a_inv = torch.empty(batch, seq_len, heads, CHUNK, **f32)
    t_beta, t_beta_gamma = torch.empty_like(a_inv), torch.empty_like(a_inv)
    w = torch.empty(batch, seq_len, heads, dim_k, **f32)
    u = torch.empty(batch, seq_len, heads, dim_v, **f32)
    _wy_fwd_kernel[(num_chunks, batch * heads)](
        k, g, beta, g_cum, a_inv, t_beta, t_beta_gamma, seq_len,
        H=heads, K=dim_k, C=CHUNK, S=gdn_chunk.SUB_BLOCK, BK=block_k,
        K_END=round_up(dim_k, block_k), PREC=prec, num_warps=gdn_chunk.NUM_WARPS["wy_fwd"],
    )  # fmt: skip
    for scaled, x, out, dim, block in (
        (t_beta_gamma, k, w, dim_k, block_k),
        (t_beta, v, u, dim_v, block_v),
    ):
        _wy_apply_fwd_kernel[(num_chunks, batch * heads)](
            scaled, x, out, seq_len, H=heads, D=dim, C=CHUNK, RC=gdn_chunk.REDUCE_BLOCK,
            BD=block, D_END=round_up(dim, block), PREC=prec,
            num_warps=gdn_chunk.NUM_WARPS["wy_apply_fwd"],
        )  # fmt: skip
    return {"k": k, "g_cum": g_cum, "w": w, "u": u}


def shipped_scan(inp: dict, h0: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """(entering states, Vn, final state) from the shipped ``_state_fwd_kernel``, launched
    as chunk.py launches it."""
    k, w, u = inp["k"], inp["w"], inp["u"]
    batch, seq_len, heads, dim_k = k.shape
    dim_v = u.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK)
    reduce_k = tile_width(dim_k, gdn_chunk.REDUCE_BLOCK)
    block_v = gdn_chunk._scan_block_v(dim_k, dim_v)
    tiles = triton.cdiv(dim_v, block_v)
    f32 = dict(device=k.device, dtype=torch.float32)
    states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, **f32)
    v_new = torch.empty(batch, seq_len, heads, dim_v, **f32)
    final = torch.empty(batch, heads, dim_k, dim_v, **f32)
    scratch = torch.empty(batch * heads * tiles, CHUNK, block_v, **f32)
    _state_fwd_kernel[(tiles, batch * heads)](
        k, w, u, inp["g_cum"], h0 if h0 is not None else w, states, v_new, final, scratch,
        seq_len, num_chunks, round_up(dim_k, reduce_k), H=heads, K=dim_k, V=dim_v, C=CHUNK,
        RK=reduce_k, RC=gdn_chunk.REDUCE_BLOCK, BV=block_v, HAS_H0=h0 is not None,
        STORE_HT=True, PREC=gdn_chunk._dot_precision(k.dtype),
        num_warps=gdn_chunk.NUM_WARPS["state_fwd"],
    )  # fmt: skip
    return states, v_new, final


def register_scan(
    inp: dict,
    h0: torch.Tensor | None,
    dot: str,
    block_v: int,
    split_k: int,
    warps: int,
    stages: int | None = None,
) -> tuple[torch.Tensor, ...]:
    """(entering states, Vn, final state) from the register-resident prototype; ``stages``
    None is Triton's default pipelining."""
    k, w, u = inp["k"], inp["w"], inp["u"]
    batch, seq_len, heads, dim_k = k.shape
    dim_v = u.shape[-1]
    for name, dim in (("K", dim_k), ("V", dim_v)):
        if dim & (dim - 1) or dim < 16:
            raise ValueError(f"the prototype needs a power-of-two {name} >= 16, got {dim}")
    num_chunks = triton.cdiv(seq_len, CHUNK)
    f32 = dict(device=k.device, dtype=torch.float32)
    states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, **f32)
    v_new = torch.empty(batch, seq_len, heads, dim_v, **f32)
    final = torch.empty(batch, heads, dim_k, dim_v, **f32)
    _scan_registers_kernel[(triton.cdiv(dim_v, block_v), batch * heads)](
        k, w, u, inp["g_cum"], h0 if h0 is not None else w, states, v_new, final,
        seq_len, num_chunks, heads, K=dim_k, V=dim_v, C=CHUNK, BV=block_v, NK=split_k,
        HAS_H0=h0 is not None, STORE_HT=True, DOT=dot, num_warps=warps,
        **({} if stages is None else {"num_stages": stages}),
    )  # fmt: skip
    return states, v_new, final


def reference_scan(inp: dict, h0: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """The same recurrence as a float64 torch loop over chunks (on the same W, U, G)."""
    k, w, u, g_cum = (inp[n].double() for n in ("k", "w", "u", "g_cum"))
    batch, seq_len, heads, dim_k = k.shape
    dim_v = u.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK)
    h = (
        h0.double().clone()
        if h0 is not None
        else torch.zeros(batch, heads, dim_k, dim_v, dtype=torch.float64)
    )
    states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, dtype=torch.float64)
    v_new = torch.empty(batch, seq_len, heads, dim_v, dtype=torch.float64)
    for n in range(num_chunks):
        rows = slice(n * CHUNK, min(n * CHUNK + CHUNK, seq_len))
        states[:, n] = h
        vn = u[:, rows] - torch.einsum("bthk,bhkv->bthv", w[:, rows], h)
        v_new[:, rows] = vn
        g = g_cum[:, rows]  # [B, t, H]
        g_last = g[:, -1:]
        decayed = vn * torch.exp(g_last - g)[..., None]
        h = torch.exp(g_last[:, 0])[..., None, None] * h + torch.einsum(
            "bthk,bthv->bhkv", k[:, rows], decayed
        )
    return states, v_new, h


def max_rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (a tensor-wide relative error, robust to zeros)."""
    want = want.double().cpu()
    return float((got.double().cpu() - want).abs().max() / want.abs().max().clamp_min(1e-30))


def make_inputs(batch: int, seq_len: int, heads: int, dim_k: int, dim_v: int, device: str):
    """Random GDN inputs as the tests draw them (unit-norm keys, logsigmoid gates)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (batch, seq_len, heads)
    k = torch.nn.functional.normalize(torch.randn(*shape, dim_k, generator=gen), dim=-1)
    v = torch.randn(*shape, dim_v, generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(shape, generator=gen))
    beta = torch.rand(shape, generator=gen)
    h0 = torch.randn(batch, heads, dim_k, dim_v, generator=gen)
    return [x.to(device) for x in (k, v, g, beta, h0)]


def variants(dims: tuple[int, ...] = (128,)) -> list[dict[str, Any]]:
    """The (K = V, dot, BV, NK, warps, stages) the compile mode tries. At K = 128 every dot,
    BV, warp count and pipelining depth with the unsplit state, the state split in two (NK =
    2) for the two TF32 dots and in four (NK = 4) for tf32x3, the candidate that needs it;
    at smaller K a few (default stages) as a check that fewer rows compile smaller."""
    out = []
    for d in dims:
        for dot in DOTS:
            for bv in BLOCKS_V:
                for nk in SPLITS_K:
                    for nw in WARPS:
                        for st in STAGES:
                            full = d == 128 and (
                                nk == 1 or (nk == 2 and dot == "tf32") or dot == "tf32x3"
                            )
                            small = (
                                d < 128
                                and nk == 1
                                and nw == 4
                                and st is None
                                and dot in ("ieee", "tf32x3")
                            )
                            if bv <= d and bv >= 32 * (d < 128) and (full or small):
                                out.append({"K": d, "V": d, "dot": dot, "BV": bv, "NK": nk,
                                            "warps": nw, "stages": st})  # fmt: skip
    return out


def label(v: dict[str, Any]) -> str:
    stages = "default" if v.get("stages") is None else v["stages"]
    return (
        f"K={v['K']} V={v['V']} {v['dot']} BV={v['BV']} NK={v['NK']} warps={v['warps']} "
        f"stages={stages}"
    )


# -- modes ---------------------------------------------------------------------------------


def check(dims: tuple[int, ...] = (32, 64), seq_len: int = 200) -> list[dict[str, Any]]:
    """Interpreter correctness of every (dot, BV, NK) at K = V in ``dims`` (warps do not
    matter to the interpreter): max relative error of states, Vn and the final state
    against the shipped kernel and the fp64 loop. Not "bf16": the interpreter (Triton 3.9)
    returns garbage for a dot of values converted to bf16 (errors ~1e10 even on a lone
    16 x 16 product), so that variant is compiled for its resources only."""
    rows = []
    for dim in dims:
        k, v, g, beta, h0 = make_inputs(1, seq_len, 2, dim, dim, "cpu")
        inp = wy_inputs(k, v, g, beta)
        shipped = shipped_scan(inp, h0)
        ref = reference_scan(inp, h0)
        for dot in (d for d in DOTS if d != "bf16"):
            for bv in (b for b in BLOCKS_V if b <= dim):
                for nk in (n for n in SPLITS_K if dim // n >= 16):  # a dot needs 16 rows
                    got = register_scan(inp, h0, dot, bv, nk, 4)
                    row = {"K": dim, "V": dim, "T": seq_len, "dot": dot, "BV": bv, "NK": nk}
                    for name, want in (("shipped", shipped), ("fp64", ref)):
                        row[f"vs_{name}"] = {
                            part: max_rel_error(x, y)
                            for part, x, y in zip(("states", "v_new", "final"), got, want)
                        }
                    worst = max(max(row["vs_shipped"].values()), max(row["vs_fp64"].values()))
                    print(f"check K=V={dim} {dot:6} BV={bv:<2} NK={nk}: max rel err {worst:.2e}")
                    rows.append(row)
    return rows


def record_variants(dims: tuple[int, ...]) -> list[tuple[dict, dict]]:
    """(variant, launch record) for every variant: one tiny interpreted launch each (T = 70,
    two chunks; T, NT and H are not specialized, so the record is the large shape's)."""
    from triton.runtime.interpreter import InterpretedFunction

    from kernelgate.sandbox.resources import LaunchRecorder

    out = []
    by_dim = {}
    for var in variants(dims):
        if var["K"] not in by_dim:
            k, v, g, beta, h0 = make_inputs(1, 70, 2, var["K"], var["V"], "cpu")
            by_dim[var["K"]] = (wy_inputs(k, v, g, beta), h0)
        inp, h0 = by_dim[var["K"]]
        recorder = LaunchRecorder()
        original_run = InterpretedFunction.run
        recorder.install(interpreter=True)
        try:
            register_scan(inp, h0, var["dot"], var["BV"], var["NK"], var["warps"], var["stages"])
        finally:
            InterpretedFunction.run = original_run
        records = [r for r in recorder.drain() if r["name"] == "_scan_registers_kernel"]
        out.append((var, records[0]))
    return out


def compile_mode(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Offline sm_90 resources of every variant with each Triton installation, into
    ``report["compile"]``; in batches, the report rewritten to ``--out`` after each, so a
    run cut short keeps what it compiled."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _offline_compile import compile_offline, resource_fields, resource_text, triton_sites

    pairs = record_variants(tuple(args.dims))
    rows: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    report["compile"] = {"compile_seconds": timings, "rows": rows}

    def one(site: str | None, batch: list[dict]) -> tuple[str, list[dict], float]:
        started = time.monotonic()
        version, results = compile_offline(batch, Path(__file__).resolve(), site)
        return version, results, time.monotonic() - started

    for start in range(0, len(pairs), args.batch):
        part = pairs[start : start + args.batch]
        records = [r for _, r in part]
        # the two installations compile in parallel (two processes, one core each)
        with ThreadPoolExecutor(max_workers=2) as pool:
            compiled = list(pool.map(one, triton_sites(args.triton36), [records] * 2))
        for version, results, seconds in compiled:
            timings[version] = round(timings.get(version, 0.0) + seconds, 1)
            for (var, _), res in zip(part, results, strict=True):
                row = {"triton": version, **var, **resource_fields(res)}
                rows.append(row)
                print(f"triton {version:6} {label(var):42} {resource_text(row)}", flush=True)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"offline compile (s): {timings}")


def spill_free(compiled: dict[str, Any]) -> list[dict[str, Any]]:
    """Variants (K = V = 128) without spills and within sm_90's shared memory under every
    Triton the JSON lists (the others would not launch, or would time their spills)."""
    keys = ("K", "V", "dot", "BV", "NK", "warps", "stages")
    verdict: dict[tuple, bool] = {}
    for row in compiled["rows"]:
        key = tuple(row.get(k) for k in keys)
        ok = not row["spills"] and row.get("fits_shared", True)
        verdict[key] = verdict.get(key, True) and ok
    return [dict(zip(keys, key)) for key, ok in verdict.items() if ok and key[0] == 128]


def time_mode(args: argparse.Namespace) -> dict[str, Any]:
    """H200 timing of spill-free variants against the shipped scan, with a states check."""
    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        sys.exit("--time needs a CUDA device (and TRITON_INTERPRET unset); none is available")
    from triton.testing import do_bench

    if args.variants:
        chosen = [
            {
                "K": 128,
                "V": 128,
                "dot": d,
                "BV": int(bv),
                "NK": int(nk),
                "warps": int(w),
                "stages": None if st == "default" else int(st),
            }
            for d, bv, nk, w, st in (s.split(":") for s in args.variants)
        ]
    else:
        chosen = spill_free(json.loads(Path(args.from_json).read_text())["compile"])
    rows = []
    for seq_len in (4096, 16384):
        k, v, g, beta, h0 = make_inputs(2, seq_len, 16, 128, 128, "cuda")
        inp = wy_inputs(k, v, g, beta)
        want = shipped_scan(inp, h0)
        shipped_ms = do_bench(lambda inp=inp, h0=h0: shipped_scan(inp, h0))
        rows.append({"T": seq_len, "variant": "shipped _state_fwd_kernel", "ms": shipped_ms})
        print(f"T={seq_len} shipped: {shipped_ms:.3f} ms")
        for var in chosen:

            def run(inp: dict = inp, h0: torch.Tensor = h0, var: dict = var) -> tuple:
                return register_scan(
                    inp, h0, var["dot"], var["BV"], var["NK"], var["warps"], var["stages"]
                )

            got = run()
            err = {
                part: max_rel_error(x, y)
                for part, x, y in zip(("states", "v_new", "final"), got, want)
            }
            ms = do_bench(run)
            rows.append({"T": seq_len, "variant": label(var), **var, "ms": ms, "vs_shipped": err})
            print(f"T={seq_len} {label(var)}: {ms:.3f} ms, max rel err {max(err.values()):.2e}")
    return {
        "device": torch.cuda.get_device_name(),
        "shape": "B=2, H=16, K=V=128, fp32 k",
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="interpreter correctness")
    parser.add_argument("--compile", action="store_true", help="offline sm_90 resources")
    parser.add_argument("--time", action="store_true", help="CUDA timing (a later H200 run)")
    parser.add_argument("--triton36", default="/tmp/tr36site", help="folder holding Triton 3.6")
    parser.add_argument("--dims", type=int, nargs="+", default=[128, 64], help="K = V compiled")
    parser.add_argument("--from", dest="from_json", help="--time: the compile JSON")
    parser.add_argument(
        "--variants",
        nargs="+",
        help="--time: DOT:BV:NK:WARPS:STAGES (STAGES a number or default) instead",
    )
    parser.add_argument("--batch", type=int, default=8, help="records per compile process")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    if not (args.check or args.compile or args.time):
        parser.error("give --check, --compile and/or --time")
    if args.time and (args.check or args.compile):
        parser.error("--time runs without the interpreter: give it alone")
    if args.time and not (args.from_json or args.variants):
        parser.error("--time needs --from JSON or --variants")
    report: dict[str, Any] = {
        "what": "register-resident GDN forward state scan prototypes (benchmarks/"
        "gdn_scan_registers.py): correctness and offline sm_90 resources",
        "command": "PYTHONPATH=src python "
        + " ".join(["benchmarks/gdn_scan_registers.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if args.time:
        report["time"] = time_mode(args)
    else:
        report["device"] = "offline sm_90 compile (no GPU); correctness under TRITON_INTERPRET=1"
    if args.check:
        report["check"] = check()
    if args.compile:
        compile_mode(args, report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
