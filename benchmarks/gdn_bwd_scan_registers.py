"""Does a register-resident GDN backward state-gradient scan compile for sm_90 without spills?

The backward's half of the experiment in benchmarks/gdn_scan_registers.py (docs/kernels/gdn.md,
"Register-resident scan: offline resources" and the backward subsection after it). The shipped
``_state_bwd_kernel`` (kernels/gdn/chunk_bwd.py) keeps the state gradient in its chunk buffer
in global memory and reduces over at most 32 columns per dot with both operands loaded,
because IEEE fp32 ``tl.dot`` with a register operand spilled on sm_90. The prototype here keeps
dH [K, BV] (fp32) in registers across the whole reverse chunk loop, one program per (batch *
head, V tile), and per chunk computes what ``_state_bwd_kernel`` computes (same inputs: q, k,
W, G, the forward's decayed scores P, dO, the final state's gradient):

    store dH (= dH_next of this chunk, the gradient of the state leaving it)
    dVn = scale P^T dO + diag(exp(G_L - G)) K dH;  store dVn
    dH = exp(G_L) dH + Q^T (scale diag(gamma) dO) - W^T dVn
    (after chunk 0: store dH as d initial_state)

Variants, as in the forward prototype: dot precision DOT in {"ieee", "tf32", "tf32x3",
"bf16"} ("bf16" casts both operands to bf16: inexact here, a resource lower bound), BV in
{16, 32, 64}, NK in {1, 2, 4} (dH kept as NK row tiles of K / NK rows), num_warps {4, 8},
num_stages {default, 2, 1}; and FUSE in {0, 1}. FUSE = 1 also computes, while dH_next and
dO, dVn are live, this V tile's share of the per-chunk products that ``_qk_bwd_kernel`` now
recomputes from memory: dq_state = scale diag(gamma) dO H^T, dW = -dVn H^T, dk_state =
diag(exp(G_L - G)) Vn dH_next^T (all [C, K], stored as per-V-tile partials that a later
kernel would sum) and the gate term sum(H * dH_next); H and Vn come from the forward's
buffers. Whether the scan program has the registers for that is what --compile measures.
And HALVES in {0, 1}: 1 processes each chunk as two halves of C / 2 = 32 rows (dO, dVn and
the scaled dO as pairs of [32, BV] tiles, every dot reducing over 32 chunk steps or K / NK
state rows, P^T dO skipping its zero block), to see whether smaller dot operands relieve
the registers (they did not: docs/kernels/gdn.md).

Modes (each independent):

``--check``   correctness under TRITON_INTERPRET=1 (set by this script): B=1, H=2, T=200
              (a ragged last chunk), K=V=32 and 64, with an initial state and a final
              state gradient, against the shipped ``_state_bwd_kernel`` on the same inputs
              and against a float64 torch loop (the fused partials, summed over V tiles,
              against the loop and the shipped ``_qk_bwd_kernel``'s dW). The interpreter
              computes every dot in fp32: this checks the algorithm, not TF32 rounding.
``--compile`` records one launch per variant under the interpreter (K=V=128, and 64 as a
              check), compiles each offline for sm_90 (``kernelgate.sandbox.resources.
              compile_records``, this file as the "candidate") with the installed Triton
              and with ``--triton36 DIR``; registers, spill bytes, shared memory per variant
              to ``--out`` JSON.
``--time``    on a CUDA device (no interpreter): times the variants ``--from`` lists as
              spill-free under every Triton, and those given by ``--variants``, against the
              shipped ``_state_bwd_kernel`` (and, for context, the shipped six-kernel
              backward) at B=2, H=16, K=V=128, T=4096 and 16384 (``triton.testing.do_bench``),
              and checks dH, dVn, dh0 against the shipped kernel. ``--time --dry`` runs the
              same code path on the CPU under the interpreter at B=1, H=2, K=V=32, T=70 and
              130, each launch run once instead of benchmarked: a check that it would run.

    PYTHONPATH=src python benchmarks/gdn_bwd_scan_registers.py --check --compile \
        --triton36 /tmp/tr36site --out benchmarks/results/gdn-bwd-scan-registers-cpu.json
    PYTHONPATH=src python benchmarks/gdn_bwd_scan_registers.py --table \
        benchmarks/results/gdn-bwd-scan-registers-cpu.json   # the docs' table
    PYTHONPATH=src python benchmarks/gdn_bwd_scan_registers.py --time \
        --from benchmarks/results/gdn-bwd-scan-registers-cpu.json --out FILE

The kernels live in this script, not under src/: they are a measurement, not shipped code.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

# The interpreter for --check/--compile/--time --dry, decided before Triton is imported. When
# compile_records imports this file as a candidate, __name__ is not "__main__": no interpreter.
if __name__ == "__main__" and ("--time" not in sys.argv or "--dry" in sys.argv):
    os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
try:
    import kernelgate  # noqa: F401
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, str(ROOT / "src"))


def _forward_prototype() -> ModuleType:
    """benchmarks/gdn_scan_registers.py (the forward prototype) as the module
    ``gdn_scan_registers``, loaded by path: benchmarks are scripts, not a package, and putting
    benchmarks/ on sys.path would let its file names shadow modules in whatever process
    imports this one (a test session)."""
    name = "gdn_scan_registers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# Shared with the forward prototype: its grid axes, shared-memory limit, dot helper (a
# @triton.jit the kernel below calls), inputs and error measure.
_fwd = _forward_prototype()
BLOCKS_V, DOTS, SPLITS_K, STAGES, WARPS = (
    _fwd.BLOCKS_V, _fwd.DOTS, _fwd.SPLITS_K, _fwd.STAGES, _fwd.WARPS
)  # fmt: skip
SM90_MAX_SHARED = _fwd.SM90_MAX_SHARED
_dot = _fwd._dot
make_inputs = _fwd.make_inputs
max_rel_error = _fwd.max_rel_error

from kernelgate.kernels._common import round_up, tile_width  # noqa: E402
from kernelgate.kernels._tiles import batch_head, chunk_base  # noqa: E402
from kernelgate.kernels.gdn import chunk as gdn_chunk  # noqa: E402
from kernelgate.kernels.gdn.chunk_bwd import (  # noqa: E402
    _dscores_bwd_kernel,
    _qk_bwd_kernel,
    _state_bwd_kernel,
)
from kernelgate.kernels.gdn.chunk_fwd import _load_gate_cumsum  # noqa: E402

CHUNK = gdn_chunk.CHUNK_SIZE
FUSES = (0, 1)
PARTS = ("d_states", "d_v_new", "dh0")  # what both scans return, in this order
FUSED_PARTS = ("dq_state", "dw", "dk_state", "hdh")  # FUSE = 1's extra outputs


# -- kernel --------------------------------------------------------------------------------


@triton.jit
def _rows_times(base, x, o_c, o_k, m_t, H, K: tl.constexpr, DOT: tl.constexpr):
    """X[:, rows o_k] x: the chunk's [C, K / NK] slice of a [B, T, H, K] tensor (loaded here,
    just before its dot, so it is not live elsewhere) times a register tile [K / NK, BV]."""
    b_x = tl.load(base + o_c[:, None] * (H * K) + o_k[None, :], mask=m_t[:, None], other=0.0)
    return _dot(b_x.to(tl.float32), x, DOT)


@triton.jit
def _rows_t_times(base, x, o_c, o_k, m_t, H, K: tl.constexpr, DOT: tl.constexpr):
    """X[:, rows o_k]^T x: [K / NK, C] (loaded through transposed addresses, not tl.trans of
    a register tile) times a register tile [C, BV]."""
    b_xt = tl.load(base + o_c[None, :] * (H * K) + o_k[:, None], mask=m_t[None, :], other=0.0)
    return _dot(b_xt.to(tl.float32), x, DOT)


@triton.jit
def _fused_rows(
    h_base,
    vn_base,
    dq_base,
    dw_base,
    dk_base,
    dh,
    b_do,
    b_dvn,
    gamma_scale,
    k_decay,
    o_c,
    o_k,
    o_v,
    m_t,
    H,
    K: tl.constexpr,
    V: tl.constexpr,
    DOT: tl.constexpr,
):
    """FUSE = 1: for the state rows o_k, this V tile's share of dq_state = scale diag(gamma)
    dO H^T, dW = -dVn H^T (H^T loaded once for both) and dk_state = diag(exp(G_L - G)) Vn
    dH_next^T (computed as its transpose dH_next Vn^T, so dH stays the dot's register operand
    and Vn^T is loaded by address), each stored to its partial's chunk rows; returns
    sum(H * dH_next) over the tile (the G_L term)."""
    m_row = m_t[:, None]
    off = o_c[:, None] * (H * K) + o_k[None, :]
    b_ht = tl.load(h_base + o_k[None, :] * V + o_v[:, None])  # [BV, K / NK]
    tl.store(dq_base + off, _dot(b_do, b_ht, DOT) * gamma_scale[:, None], mask=m_row)
    tl.store(dw_base + off, -_dot(b_dvn, b_ht, DOT), mask=m_row)
    b_vnt = tl.load(vn_base + o_c[None, :] * (H * V) + o_v[:, None], mask=m_t[None, :], other=0.0)
    dk_t = _dot(dh, b_vnt, DOT) * k_decay[None, :]  # [K / NK, C]
    tl.store(dk_base + o_c[None, :] * (H * K) + o_k[:, None], dk_t, mask=m_t[None, :])
    b_h = tl.load(h_base + o_k[:, None] * V + o_v[None, :])
    return tl.sum(tl.sum(b_h * dh, axis=1), axis=0)


@triton.jit
def _gate_half(gcum_ptr, i_b, i_h, i_n, T, H, o_r, g_last, C: tl.constexpr):
    """The fp64 cumulative gates of the chunk rows o_r (one half) and their mask; padded
    rows get G_L, as _load_gate_cumsum gives them."""
    t_idx = i_n * C + o_r
    m_r = t_idx < T
    g_cum = tl.load(gcum_ptr + (i_b * T + t_idx) * H + i_h, mask=m_r, other=0.0)
    return tl.where(m_r, g_cum, g_last), m_r


@triton.jit
def _pt_times(scores_base, o_j, o_i, m_i, b_do, H, C: tl.constexpr, DOT: tl.constexpr):
    """P^T[rows o_j, rows o_i] dO[rows o_i]: one [C / 2, C / 2] block of the decayed scores,
    P[i, j] loaded through transposed addresses."""
    b_pt = tl.load(
        scores_base + o_i[None, :] * (H * C) + o_j[:, None], mask=m_i[None, :], other=0.0
    )
    return _dot(b_pt, b_do, DOT)


@triton.jit
def _k_dh_half(
    k_base, dh_a, dh_b, dh_c, dh_d, o_r, o_ka, o_kb, o_kc, o_kd, m_r, H,
    K: tl.constexpr, NK: tl.constexpr, DOT: tl.constexpr,
):  # fmt: skip
    """K[rows o_r] dH_next for one half of the chunk: a sum over the NK state row tiles."""
    acc = _rows_times(k_base, dh_a, o_r, o_ka, m_r, H, K, DOT)
    if NK >= 2:
        acc += _rows_times(k_base, dh_b, o_r, o_kb, m_r, H, K, DOT)
    if NK == 4:
        acc += _rows_times(k_base, dh_c, o_r, o_kc, m_r, H, K, DOT)
        acc += _rows_times(k_base, dh_d, o_r, o_kd, m_r, H, K, DOT)
    return acc


@triton.jit
def _update_halves(
    q_base, w_base, dh, decay, dog_0, dog_1, dvn_0, dvn_1, o_r0, o_r1, o_k, m_0, m_1, H,
    K: tl.constexpr, DOT: tl.constexpr,
):  # fmt: skip
    """exp(G_L) dH + Q^T (scale diag(gamma) dO) - W^T dVn for the state rows o_k, each
    product reduced over the chunk's two halves (operands [K / NK, C / 2] and [C / 2, BV])."""
    acc = _rows_t_times(q_base, dog_0, o_r0, o_k, m_0, H, K, DOT)
    acc += _rows_t_times(q_base, dog_1, o_r1, o_k, m_1, H, K, DOT)
    acc -= _rows_t_times(w_base, dvn_0, o_r0, o_k, m_0, H, K, DOT)
    acc -= _rows_t_times(w_base, dvn_1, o_r1, o_k, m_1, H, K, DOT)
    return dh * decay + acc


@triton.jit
def _fused_halves(
    h_base, vn_base, dq_base, dw_base, dk_base, dh, do_0, do_1, dvn_0, dvn_1, gs_0, gs_1,
    kd_0, kd_1, o_r0, o_r1, o_k, o_v, m_0, m_1, H,
    K: tl.constexpr, V: tl.constexpr, DOT: tl.constexpr,
):  # fmt: skip
    """_fused_rows for both halves of the chunk (state rows o_k); the G_L term once."""
    hdh = _fused_rows(
        h_base, vn_base, dq_base, dw_base, dk_base, dh, do_0, dvn_0, gs_0, kd_0, o_r0, o_k,
        o_v, m_0, H, K, V, DOT,
    )  # fmt: skip
    _fused_rows(
        h_base, vn_base, dq_base, dw_base, dk_base, dh, do_1, dvn_1, gs_1, kd_1, o_r1, o_k,
        o_v, m_1, H, K, V, DOT,
    )  # fmt: skip
    return hdh


# T, NT, H runtime values (as in the shipped scan); K, V powers of two (a prototype: no masks
# on K or V beyond the V tile).
@triton.jit(do_not_specialize=["T", "NT", "H"])
def _bwd_scan_registers_kernel(
    q_ptr,
    k_ptr,
    w_ptr,
    gcum_ptr,
    scores_ptr,
    do_ptr,
    dht_ptr,  # inputs (q, k, dO in their dtype, W, P, dht fp32, G fp64)
    h_ptr,
    vn_ptr,  # FUSE inputs: the forward's entering states and Vn (fp32)
    dh_ptr,
    dvn_ptr,
    dh0_ptr,  # outputs (fp32): dH_next [B, NT, H, K, V], dVn [B, T, H, V], d initial state
    dq_part_ptr,
    dw_part_ptr,
    dk_part_ptr,
    hdh_part_ptr,  # FUSE outputs (fp32): [NVT, B, T, H, K] x 3, [NVT, B * H, NT]
    T,
    NT,
    H,
    scale,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BV: tl.constexpr,
    NK: tl.constexpr,
    HAS_DHT: tl.constexpr,
    STORE_DH0: tl.constexpr,
    FUSE: tl.constexpr,
    HALVES: tl.constexpr,
    SPLIT_PT: tl.constexpr,
    DOT: tl.constexpr,
):
    """The reverse state-gradient scan of one (batch, head, V tile) with dH in registers: NK
    (1, 2 or 4) row tiles dh_a .. dh_d of K / NK rows (those past NK unused), carried through
    the reverse chunk loop. dO is loaded once per chunk and serves both P^T dO and the
    scaled dO of the update; nothing this program stores is re-read (no CTA barriers).
    HALVES = 1 works on the chunk's two halves of C / 2 rows: dO, dVn and the scaled dO are
    pairs of [C / 2, BV] tiles, every dot reduces over C / 2 (or K / NK) columns, and P^T dO
    skips the block of P^T that causality makes zero (3 of the 4 [C / 2, C / 2] blocks).
    HALVES = 0's code is the one first compiled (rows without "halves" in the JSON).
    SPLIT_PT = 1 (whole form only) reduces P^T dO over two halves of the chunk's steps, the
    one change from the first compiled code (rows without "split_pt" have SPLIT_PT = 0)."""
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
    state_off = i_bh.to(tl.int64) * K * V
    dh_a = tl.zeros([BKS, BV], dtype=tl.float32)
    dh_b = tl.zeros([BKS, BV], dtype=tl.float32)
    dh_c = tl.zeros([BKS, BV], dtype=tl.float32)
    dh_d = tl.zeros([BKS, BV], dtype=tl.float32)
    if HAS_DHT:
        dh_a += tl.load(dht_ptr + state_off + o_ka[:, None] * V + o_v[None, :])
        if NK >= 2:
            dh_b += tl.load(dht_ptr + state_off + o_kb[:, None] * V + o_v[None, :])
        if NK == 4:
            dh_c += tl.load(dht_ptr + state_off + o_kc[:, None] * V + o_v[None, :])
            dh_d += tl.load(dht_ptr + state_off + o_kd[:, None] * V + o_v[None, :])
    # FUSE partials: V tile i_v's [B, T, H, K] slab (num_programs(1) = B * H)
    slab = i_v.to(tl.int64) * tl.num_programs(1) * T * K
    for step in range(0, NT):
        i_n = NT - 1 - step
        m_t, chunk_row = chunk_base(i_b, i_h, i_n, T, H, C)
        state_base = ((i_b * NT + i_n) * H + i_h) * K * V
        dh_base = dh_ptr + state_base
        k_base = k_ptr + chunk_row * K
        if HALVES:
            tl.store(dh_base + o_ka[:, None] * V + o_v[None, :], dh_a)
            if NK >= 2:
                tl.store(dh_base + o_kb[:, None] * V + o_v[None, :], dh_b)
            if NK == 4:
                tl.store(dh_base + o_kc[:, None] * V + o_v[None, :], dh_c)
                tl.store(dh_base + o_kd[:, None] * V + o_v[None, :], dh_d)
            R: tl.constexpr = C // 2
            o_r0 = tl.arange(0, R)
            o_r1 = R + o_r0
            last = tl.minimum(i_n * C + C, T) - 1
            g_last = tl.load(gcum_ptr + (i_b * T + last) * H + i_h)
            g_0, m_0 = _gate_half(gcum_ptr, i_b, i_h, i_n, T, H, o_r0, g_last, C)
            g_1, m_1 = _gate_half(gcum_ptr, i_b, i_h, i_n, T, H, o_r1, g_last, C)
            kd_0 = tl.where(m_0, tl.exp((g_last - g_0).to(tl.float32)), 0.0)
            kd_1 = tl.where(m_1, tl.exp((g_last - g_1).to(tl.float32)), 0.0)
            do_base = do_ptr + chunk_row * V
            do_0 = tl.load(
                do_base + o_r0[:, None] * (H * V) + o_v[None, :], mask=m_0[:, None], other=0.0
            ).to(tl.float32)
            do_1 = tl.load(
                do_base + o_r1[:, None] * (H * V) + o_v[None, :], mask=m_1[:, None], other=0.0
            ).to(tl.float32)
            s_base = scores_ptr + chunk_row * C
            dvn_base = dvn_ptr + chunk_row * V
            # dVn rows of the first half: P^T's blocks (0, 0) and (0, 1); the second half
            # only (1, 1): P^T[j, i] = P[i, j] is zero for i < j
            pdo = _pt_times(s_base, o_r0, o_r0, m_0, do_0, H, C, DOT)
            pdo += _pt_times(s_base, o_r0, o_r1, m_1, do_1, H, C, DOT)
            kdh = _k_dh_half(
                k_base, dh_a, dh_b, dh_c, dh_d, o_r0, o_ka, o_kb, o_kc, o_kd, m_0, H, K, NK, DOT
            )
            dvn_0 = kdh * kd_0[:, None] + pdo * scale
            tl.store(dvn_base + o_r0[:, None] * (H * V) + o_v[None, :], dvn_0, mask=m_0[:, None])
            pdo = _pt_times(s_base, o_r1, o_r1, m_1, do_1, H, C, DOT)
            kdh = _k_dh_half(
                k_base, dh_a, dh_b, dh_c, dh_d, o_r1, o_ka, o_kb, o_kc, o_kd, m_1, H, K, NK, DOT
            )
            dvn_1 = kdh * kd_1[:, None] + pdo * scale
            tl.store(dvn_base + o_r1[:, None] * (H * V) + o_v[None, :], dvn_1, mask=m_1[:, None])
            gs_0 = tl.where(m_0, tl.exp(g_0.to(tl.float32)), 0.0) * scale
            gs_1 = tl.where(m_1, tl.exp(g_1.to(tl.float32)), 0.0) * scale
            if FUSE:
                h_base = h_ptr + state_base
                vn_base = vn_ptr + chunk_row * V
                dq_base = dq_part_ptr + slab + chunk_row * K
                dw_base = dw_part_ptr + slab + chunk_row * K
                dk_base = dk_part_ptr + slab + chunk_row * K
                hdh = _fused_halves(
                    h_base, vn_base, dq_base, dw_base, dk_base, dh_a, do_0, do_1, dvn_0, dvn_1,
                    gs_0, gs_1, kd_0, kd_1, o_r0, o_r1, o_ka, o_v, m_0, m_1, H, K, V, DOT,
                )  # fmt: skip
                if NK >= 2:
                    hdh += _fused_halves(
                        h_base, vn_base, dq_base, dw_base, dk_base, dh_b, do_0, do_1, dvn_0,
                        dvn_1, gs_0, gs_1, kd_0, kd_1, o_r0, o_r1, o_kb, o_v, m_0, m_1, H, K, V,
                        DOT,
                    )  # fmt: skip
                if NK == 4:
                    hdh += _fused_halves(
                        h_base, vn_base, dq_base, dw_base, dk_base, dh_c, do_0, do_1, dvn_0,
                        dvn_1, gs_0, gs_1, kd_0, kd_1, o_r0, o_r1, o_kc, o_v, m_0, m_1, H, K, V,
                        DOT,
                    )  # fmt: skip
                    hdh += _fused_halves(
                        h_base, vn_base, dq_base, dw_base, dk_base, dh_d, do_0, do_1, dvn_0,
                        dvn_1, gs_0, gs_1, kd_0, kd_1, o_r0, o_r1, o_kd, o_v, m_0, m_1, H, K, V,
                        DOT,
                    )  # fmt: skip
                hdh_row = (i_v * tl.num_programs(1) + i_bh) * NT + i_n  # [NVT, B * H, NT]
                tl.store(hdh_part_ptr + hdh_row, hdh)
            dog_0 = do_0 * gs_0[:, None]
            dog_1 = do_1 * gs_1[:, None]
            decay = tl.exp(g_last.to(tl.float32))
            q_base = q_ptr + chunk_row * K
            w_base = w_ptr + chunk_row * K
            dh_a = _update_halves(
                q_base, w_base, dh_a, decay, dog_0, dog_1, dvn_0, dvn_1, o_r0, o_r1, o_ka, m_0,
                m_1, H, K, DOT,
            )  # fmt: skip
            if NK >= 2:
                dh_b = _update_halves(
                    q_base, w_base, dh_b, decay, dog_0, dog_1, dvn_0, dvn_1, o_r0, o_r1, o_kb,
                    m_0, m_1, H, K, DOT,
                )  # fmt: skip
            if NK == 4:
                dh_c = _update_halves(
                    q_base, w_base, dh_c, decay, dog_0, dog_1, dvn_0, dvn_1, o_r0, o_r1, o_kc,
                    m_0, m_1, H, K, DOT,
                )  # fmt: skip
                dh_d = _update_halves(
                    q_base, w_base, dh_d, decay, dog_0, dog_1, dvn_0, dvn_1, o_r0, o_r1, o_kd,
                    m_0, m_1, H, K, DOT,
                )  # fmt: skip
        else:
            tl.store(dh_base + o_ka[:, None] * V + o_v[None, :], dh_a)
            kdh = _rows_times(k_base, dh_a, o_c, o_ka, m_t, H, K, DOT)
            if NK >= 2:
                tl.store(dh_base + o_kb[:, None] * V + o_v[None, :], dh_b)
                kdh += _rows_times(k_base, dh_b, o_c, o_kb, m_t, H, K, DOT)
            if NK == 4:
                tl.store(dh_base + o_kc[:, None] * V + o_v[None, :], dh_c)
                tl.store(dh_base + o_kd[:, None] * V + o_v[None, :], dh_d)
                kdh += _rows_times(k_base, dh_c, o_c, o_kc, m_t, H, K, DOT)
                kdh += _rows_times(k_base, dh_d, o_c, o_kd, m_t, H, K, DOT)
            off_v = o_c[:, None] * (H * V) + o_v[None, :]
            if SPLIT_PT:
                # P^T dO reduced over the two halves of the chunk's steps ([C, C / 2] operands,
                # not [C, C]); dO is then reloaded whole for the scaled dO instead of staying
                # live across the dVn computation
                g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
                k_decay = tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0)
                R2: tl.constexpr = C // 2
                o_h = tl.arange(0, R2)
                s_base = scores_ptr + chunk_row * C
                m_h = i_n * C + o_h < T
                b_doh = tl.load(
                    do_ptr + chunk_row * V + o_h[:, None] * (H * V) + o_v[None, :],
                    mask=m_h[:, None],
                    other=0.0,
                ).to(tl.float32)
                pdo = _pt_times(s_base, o_c, o_h, m_h, b_doh, H, C, DOT)
                m_h = i_n * C + R2 + o_h < T
                b_doh = tl.load(
                    do_ptr + chunk_row * V + (R2 + o_h)[:, None] * (H * V) + o_v[None, :],
                    mask=m_h[:, None],
                    other=0.0,
                ).to(tl.float32)
                pdo += _pt_times(s_base, o_c, R2 + o_h, m_h, b_doh, H, C, DOT)
                b_dvn = kdh * k_decay[:, None] + pdo * scale
                tl.store(dvn_ptr + chunk_row * V + off_v, b_dvn, mask=m_t[:, None])
                b_do = tl.load(do_ptr + chunk_row * V + off_v, mask=m_t[:, None], other=0.0).to(
                    tl.float32
                )
            else:
                b_do = tl.load(do_ptr + chunk_row * V + off_v, mask=m_t[:, None], other=0.0).to(
                    tl.float32
                )
                b_pt = tl.load(
                    scores_ptr + chunk_row * C + o_c[None, :] * (H * C) + o_c[:, None],
                    mask=m_t[None, :],
                    other=0.0,
                )
                g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
                k_decay = tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0)
                b_dvn = kdh * k_decay[:, None] + _dot(b_pt, b_do, DOT) * scale
                tl.store(dvn_ptr + chunk_row * V + off_v, b_dvn, mask=m_t[:, None])
            gamma_scale = tl.where(m_t, tl.exp(g_cum.to(tl.float32)), 0.0) * scale
            if FUSE:
                h_base = h_ptr + state_base
                vn_base = vn_ptr + chunk_row * V
                dq_base = dq_part_ptr + slab + chunk_row * K
                dw_base = dw_part_ptr + slab + chunk_row * K
                dk_base = dk_part_ptr + slab + chunk_row * K
                hdh = _fused_rows(
                    h_base, vn_base, dq_base, dw_base, dk_base, dh_a, b_do, b_dvn, gamma_scale,
                    k_decay, o_c, o_ka, o_v, m_t, H, K, V, DOT,
                )  # fmt: skip
                if NK >= 2:
                    hdh += _fused_rows(
                        h_base, vn_base, dq_base, dw_base, dk_base, dh_b, b_do, b_dvn, gamma_scale,
                        k_decay, o_c, o_kb, o_v, m_t, H, K, V, DOT,
                    )  # fmt: skip
                if NK == 4:
                    hdh += _fused_rows(
                        h_base, vn_base, dq_base, dw_base, dk_base, dh_c, b_do, b_dvn, gamma_scale,
                        k_decay, o_c, o_kc, o_v, m_t, H, K, V, DOT,
                    )  # fmt: skip
                    hdh += _fused_rows(
                        h_base, vn_base, dq_base, dw_base, dk_base, dh_d, b_do, b_dvn, gamma_scale,
                        k_decay, o_c, o_kd, o_v, m_t, H, K, V, DOT,
                    )  # fmt: skip
                hdh_row = (i_v * tl.num_programs(1) + i_bh) * NT + i_n  # [NVT, B * H, NT]
                tl.store(hdh_part_ptr + hdh_row, hdh)
            b_dog = b_do * gamma_scale[:, None]
            decay = tl.exp(g_last.to(tl.float32))
            q_base = q_ptr + chunk_row * K
            w_base = w_ptr + chunk_row * K
            dh_a = (
                dh_a * decay
                + _rows_t_times(q_base, b_dog, o_c, o_ka, m_t, H, K, DOT)
                - _rows_t_times(w_base, b_dvn, o_c, o_ka, m_t, H, K, DOT)
            )
            if NK >= 2:
                dh_b = (
                    dh_b * decay
                    + _rows_t_times(q_base, b_dog, o_c, o_kb, m_t, H, K, DOT)
                    - _rows_t_times(w_base, b_dvn, o_c, o_kb, m_t, H, K, DOT)
                )
            if NK == 4:
                dh_c = (
                    dh_c * decay
                    + _rows_t_times(q_base, b_dog, o_c, o_kc, m_t, H, K, DOT)
                    - _rows_t_times(w_base, b_dvn, o_c, o_kc, m_t, H, K, DOT)
                )
                dh_d = (
                    dh_d * decay
                    + _rows_t_times(q_base, b_dog, o_c, o_kd, m_t, H, K, DOT)
                    - _rows_t_times(w_base, b_dvn, o_c, o_kd, m_t, H, K, DOT)
                )
    if STORE_DH0:
        tl.store(dh0_ptr + state_off + o_ka[:, None] * V + o_v[None, :], dh_a)
        if NK >= 2:
            tl.store(dh0_ptr + state_off + o_kb[:, None] * V + o_v[None, :], dh_b)
        if NK == 4:
            tl.store(dh0_ptr + state_off + o_kc[:, None] * V + o_v[None, :], dh_c)
            tl.store(dh0_ptr + state_off + o_kd[:, None] * V + o_v[None, :], dh_d)


# -- launches ------------------------------------------------------------------------------


def bwd_inputs(batch: int, seq_len: int, heads: int, dim_k: int, dim_v: int, device: str) -> dict:
    """Everything the backward scan reads, from the shipped forward on the forward
    prototype's random inputs (make_inputs) plus q, dO and the final state's gradient."""
    k, v, g, beta, h0 = make_inputs(batch, seq_len, heads, dim_k, dim_v, device)
    gen = torch.Generator(device="cpu").manual_seed(1)
    shape = (batch, seq_len, heads)
    q = torch.nn.functional.normalize(torch.randn(*shape, dim_k, generator=gen), dim=-1)
    do = torch.randn(*shape, dim_v, generator=gen)
    dht = torch.randn(batch, heads, dim_k, dim_v, generator=gen)
    q, do, dht = (x.to(device) for x in (q, do, dht))
    scale = dim_k**-0.5
    _, _, saved = gdn_chunk.chunk_gated_delta_rule_fwd(q, k, v, g, beta, scale, h0, True)
    g_cum, a_inv, w, states, v_new, scores = saved
    return {
        "q": q, "k": k, "v": v, "beta": beta, "w": w, "g_cum": g_cum, "a_inv": a_inv,
        "scores": scores,
        "states": states, "v_new": v_new, "do": do, "dht": dht, "scale": scale,
    }  # fmt: skip


def shipped_scan(inp: dict) -> tuple[torch.Tensor, ...]:
    """(dH_next per chunk, dVn, d initial state) from the shipped ``_state_bwd_kernel``,
    launched as chunk.py's ``chunk_gated_delta_rule_bwd`` launches it."""
    q, do = inp["q"], inp["do"]
    batch, seq_len, heads, dim_k = q.shape
    dim_v = do.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK)
    reduce_k = tile_width(dim_k, gdn_chunk.REDUCE_BLOCK)
    block_v = gdn_chunk._scan_block_v(dim_k, dim_v)
    tiles = triton.cdiv(dim_v, block_v)
    f32 = dict(device=q.device, dtype=torch.float32)
    d_states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, **f32)
    d_v_new = torch.empty(batch, seq_len, heads, dim_v, **f32)
    dh0 = torch.empty(batch, heads, dim_k, dim_v, **f32)
    scratch = torch.empty(batch * heads * tiles, 2 * CHUNK, block_v, **f32)
    _state_bwd_kernel[(tiles, batch * heads)](
        q, inp["k"], inp["w"], inp["g_cum"], inp["scores"], do, inp["dht"], d_states, d_v_new,
        dh0, scratch, seq_len, num_chunks, round_up(dim_k, reduce_k), inp["scale"], H=heads,
        K=dim_k, V=dim_v, C=CHUNK, RK=reduce_k, RC=gdn_chunk.REDUCE_BLOCK, BV=block_v,
        HAS_DHT=True, STORE_DH0=True,
        PREC=gdn_chunk._dot_precision(q.dtype, "gdn._state_bwd_kernel"),
        num_warps=gdn_chunk.NUM_WARPS["state_bwd"],
    )  # fmt: skip
    return d_states, d_v_new, dh0


def shipped_dw(inp: dict, d_states: torch.Tensor, d_v_new: torch.Tensor) -> torch.Tensor:
    """dW = -dVn H^T from the shipped ``_qk_bwd_kernel`` (after ``_dscores_bwd_kernel``, whose
    dS it needs), launched as chunk.py launches them: the fused variant's dW must match it."""
    q, do = inp["q"], inp["do"]
    batch, seq_len, heads, dim_k = q.shape
    dim_v = do.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK)
    prec = gdn_chunk._dot_precision(q.dtype)
    rk = tile_width(dim_k, gdn_chunk.REDUCE_BLOCK)
    rv = tile_width(dim_v, gdn_chunk.REDUCE_BLOCK)
    f32 = dict(device=q.device, dtype=torch.float32)
    d_scores = torch.empty(batch, seq_len, heads, CHUNK, **f32)
    dg_cum_scores = torch.empty(batch, seq_len, heads, **f32)
    _dscores_bwd_kernel[(num_chunks, batch * heads)](
        do, inp["v_new"], inp["scores"], inp["g_cum"], d_scores, dg_cum_scores, seq_len,
        round_up(dim_v, rv), inp["scale"], H=heads, V=dim_v, C=CHUNK, RV=rv, PREC=prec,
        num_warps=gdn_chunk.NUM_WARPS["dscores_bwd"],
    )  # fmt: skip
    tiles_k = triton.cdiv(dim_k, rk)
    dq = torch.empty_like(q)
    dk_part = torch.empty(batch, seq_len, heads, dim_k, **f32)
    dw = torch.empty_like(dk_part)
    dg_cum_qk = torch.empty(tiles_k, batch, seq_len, heads, **f32)
    dg_last_qk = torch.empty(tiles_k, batch, num_chunks, heads, **f32)
    _qk_bwd_kernel[(tiles_k, num_chunks, batch * heads)](
        q, inp["k"], inp["g_cum"], inp["states"], d_states, inp["v_new"], d_v_new, do,
        d_scores, dq, dk_part, dw, dg_cum_qk, dg_last_qk, seq_len, num_chunks, batch,
        round_up(dim_v, rv), inp["scale"], H=heads, K=dim_k, V=dim_v, C=CHUNK,
        RC=gdn_chunk.REDUCE_BLOCK, BK=rk, RV=rv, PREC=prec,
        num_warps=gdn_chunk.NUM_WARPS["qk_bwd"],
    )  # fmt: skip
    return dw


def register_scan(
    inp: dict,
    dot: str,
    block_v: int,
    split_k: int,
    warps: int,
    stages: int | None = None,
    fuse: int = 0,
    halves: int = 0,
    split_pt: int = 0,
) -> tuple[torch.Tensor, ...]:
    """(dH_next per chunk, dVn, d initial state), and with ``fuse`` the V-tile partials
    (dq_state, dW, dk_state [NVT, B, T, H, K], sum(H * dH_next) [NVT, B * H, NT]), from the
    register-resident prototype (``halves``: the HALVES form, ``split_pt``: SPLIT_PT);
    ``stages`` None is Triton's default pipelining."""
    q, do = inp["q"], inp["do"]
    batch, seq_len, heads, dim_k = q.shape
    dim_v = do.shape[-1]
    for name, dim in (("K", dim_k), ("V", dim_v)):
        if dim & (dim - 1) or dim < 16:
            raise ValueError(f"the prototype needs a power-of-two {name} >= 16, got {dim}")
    num_chunks = triton.cdiv(seq_len, CHUNK)
    tiles = triton.cdiv(dim_v, block_v)
    f32 = dict(device=q.device, dtype=torch.float32)
    d_states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, **f32)
    d_v_new = torch.empty(batch, seq_len, heads, dim_v, **f32)
    dh0 = torch.empty(batch, heads, dim_k, dim_v, **f32)
    if fuse:
        parts = [torch.empty(tiles, batch, seq_len, heads, dim_k, **f32) for _ in range(3)]
        parts.append(torch.empty(tiles, batch * heads, num_chunks, **f32))
    else:
        parts = [d_v_new] * 4  # never touched: FUSE = 0 compiles the partials away
    _bwd_scan_registers_kernel[(tiles, batch * heads)](
        q, inp["k"], inp["w"], inp["g_cum"], inp["scores"], do, inp["dht"], inp["states"],
        inp["v_new"], d_states, d_v_new, dh0, *parts, seq_len, num_chunks, heads,
        inp["scale"], K=dim_k, V=dim_v, C=CHUNK, BV=block_v, NK=split_k, HAS_DHT=True,
        STORE_DH0=True, FUSE=fuse, HALVES=halves, SPLIT_PT=split_pt, DOT=dot,
        num_warps=warps,
        **({} if stages is None else {"num_stages": stages}),
    )  # fmt: skip
    return (d_states, d_v_new, dh0, *parts) if fuse else (d_states, d_v_new, dh0)


def reference_scan(inp: dict) -> tuple[torch.Tensor, ...]:
    """The same reverse recurrence as a float64 torch loop over chunks (on the same inputs),
    with the FUSE products over all of V: (dH_next per chunk, dVn, dh0, dq_state, dW,
    dk_state [B, T, H, K], sum(H * dH_next) [B * H, NT])."""
    names = ("q", "k", "w", "g_cum", "scores", "states", "v_new", "do", "dht")
    q, k, w, g_cum, scores, states, v_new, do, dht = (inp[n].double().cpu() for n in names)
    scale = inp["scale"]
    batch, seq_len, heads, dim_k = q.shape
    dim_v = do.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK)
    dh = dht.clone()
    d_states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, dtype=torch.float64)
    d_v_new = torch.empty(batch, seq_len, heads, dim_v, dtype=torch.float64)
    dq_state, dw, dk_state = (torch.empty_like(q) for _ in range(3))
    hdh = torch.empty(batch, heads, num_chunks, dtype=torch.float64)
    for n in reversed(range(num_chunks)):
        rows = slice(n * CHUNK, min(n * CHUNK + CHUNK, seq_len))
        steps = rows.stop - rows.start
        d_states[:, n] = dh
        g = g_cum[:, rows]  # [B, t, H]
        g_last = g[:, -1:]
        k_decay = torch.exp(g_last - g)[..., None]
        p = scores[:, rows, :, :steps]  # P[b, i, h, j]
        dvn = scale * torch.einsum("bihj,bihv->bjhv", p, do[:, rows])
        dvn = dvn + k_decay * torch.einsum("bjhk,bhkv->bjhv", k[:, rows], dh)
        d_v_new[:, rows] = dvn
        dog = do[:, rows] * (torch.exp(g) * scale)[..., None]
        h = states[:, n]
        dq_state[:, rows] = torch.einsum("bthv,bhkv->bthk", dog, h)
        dw[:, rows] = -torch.einsum("bthv,bhkv->bthk", dvn, h)
        dk_state[:, rows] = k_decay * torch.einsum("bthv,bhkv->bthk", v_new[:, rows], dh)
        hdh[:, :, n] = (h * dh).sum((-1, -2))
        dh = (
            torch.exp(g_last[:, 0])[..., None, None] * dh
            + torch.einsum("bthk,bthv->bhkv", q[:, rows], dog)
            - torch.einsum("bthk,bthv->bhkv", w[:, rows], dvn)
        )
    return d_states, d_v_new, dh, dq_state, dw, dk_state, hdh.reshape(batch * heads, num_chunks)


def fused_totals(got: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The FUSE partials summed over V tiles (what a consumer kernel would do)."""
    return tuple(x.sum(0) for x in got[3:])


def variants(dims: tuple[int, ...] = (128,)) -> list[dict[str, Any]]:
    """The (K = V, dot, BV, NK, warps, stages, fuse, halves, split_pt) the compile mode tries.

    Whole-chunk form (halves = 0), at K = 128: the forward prototype's grid (every dot, BV,
    warp count and pipelining depth with the whole dH, NK = 2 for the TF32 dots, NK = 2 and
    4 for tf32x3), unfused; fused (FUSE = 1) the likely candidates only: tf32x3, tf32 and
    bf16 at BV 16 and 32, NK 1 and (TF32) 2, default or 2 stages. At K = 64 a few (4 warps,
    default stages) as a check that fewer rows compile smaller. Then the HALVES form
    (``halves_variants``), a smaller grid around tf32x3 where the whole form spilled."""
    out = []
    for d in dims:
        for fuse in FUSES:
            for dot in DOTS:
                for bv in BLOCKS_V:
                    for nk in SPLITS_K:
                        for nw in WARPS:
                            for st in STAGES:
                                split_ok = (
                                    nk == 1 or (nk == 2 and dot == "tf32") or (dot == "tf32x3")
                                )
                                if fuse:
                                    full = (
                                        d == 128 and dot != "ieee" and bv <= 32 and nk <= 2
                                        and split_ok and st in (None, 2)
                                    )  # fmt: skip
                                else:
                                    full = d == 128 and split_ok
                                small = (
                                    d < 128 and nk == 1 and nw == 4 and st is None
                                    and (dot in ("ieee", "tf32x3") if not fuse else dot == "tf32x3")
                                )  # fmt: skip
                                if bv <= d and bv >= 32 * (d < 128) and (full or small):
                                    out.append({"K": d, "V": d, "dot": dot, "BV": bv, "NK": nk,
                                                "warps": nw, "stages": st, "fuse": fuse,
                                                "halves": 0, "split_pt": 0})  # fmt: skip
    return out + halves_variants(dims) + split_pt_variants(dims)


def halves_variants(dims: tuple[int, ...]) -> list[dict[str, Any]]:
    """The HALVES form's grid: at K = 128, tf32x3 at BV 16 and 32 with every NK, warp count
    and 2 or 1 stages (default pipelining asked for more than 227 KiB of shared memory in the
    whole form), BV 64 with NK 2 and 4 at 1 stage, BV 16, NK 2, 4 warps at default stages;
    tf32 and bf16 at BV 32 and 64, NK 1, 4 warps, 2 stages; ieee at BV 16, NK 1 and 2, 4
    warps, 1 stage; fused tf32x3 at BV 16 and 32, NK 2, 4 warps, 2 or 1 stages. At K = 64
    tf32x3 at BV 32 and 64, NK 1, 4 warps, default stages."""
    grid: list[tuple] = []  # (K, dot, BV, NK, warps, stages, fuse)
    if 128 in dims:
        for bv in (16, 32):
            for nk in SPLITS_K:
                for nw in WARPS:
                    grid += [(128, "tf32x3", bv, nk, nw, st, 0) for st in (2, 1)]
        grid += [(128, "tf32x3", 64, nk, nw, 1, 0) for nk in (2, 4) for nw in WARPS]
        grid += [(128, "tf32x3", 16, 2, 4, None, 0)]
        grid += [(128, dot, bv, 1, 4, 2, 0) for dot in ("tf32", "bf16") for bv in (32, 64)]
        grid += [(128, "ieee", 16, nk, 4, 1, 0) for nk in (1, 2)]
        grid += [(128, "tf32x3", bv, 2, 4, st, 1) for bv in (16, 32) for st in (2, 1)]
    grid += [(d, "tf32x3", bv, 1, 4, None, 0) for d in dims if d < 128 for bv in (32, 64)]
    keys = ("K", "dot", "BV", "NK", "warps", "stages", "fuse")
    return [{**dict(zip(keys, g)), "V": g[0], "halves": 1, "split_pt": 0} for g in grid]


def split_pt_variants(dims: tuple[int, ...]) -> list[dict[str, Any]]:
    """SPLIT_PT's grid (whole form, P^T dO over two halves of the steps): at K = 128 tf32x3
    at BV 16 with every NK, warp count and pipelining depth, BV 32 with NK 2 at 2 or 1 stages,
    and fused at BV 16, NK 2, 4 warps, 2 stages; at K = 64 tf32x3 BV 32, NK 1, 4 warps."""
    grid: list[tuple] = []  # (K, BV, NK, warps, stages, fuse)
    if 128 in dims:
        grid += [(128, 16, nk, nw, st, 0) for nk in SPLITS_K for nw in WARPS for st in STAGES]
        grid += [(128, 32, 2, nw, st, 0) for nw in WARPS for st in (2, 1)]
        grid += [(128, 16, 2, 4, 2, 1)]
    grid += [(d, 32, 1, 4, None, 0) for d in dims if d < 128]
    keys = ("K", "BV", "NK", "warps", "stages", "fuse")
    return [
        {**dict(zip(keys, g)), "V": g[0], "dot": "tf32x3", "halves": 0, "split_pt": 1} for g in grid
    ]


def variant_key(row: dict[str, Any]) -> tuple:
    """A variant's identity in the JSON; rows compiled before the HALVES and SPLIT_PT forms
    existed have neither key (they are the whole-chunk form: 0)."""
    return tuple(row.get(k, 0 if k in ("halves", "split_pt") else None) for k in VARIANT_KEYS)


def label(v: dict[str, Any]) -> str:
    """One line per variant, as the compile and time modes print it."""
    stages = "default" if v.get("stages") is None else v["stages"]
    return (
        f"K={v['K']} V={v['V']} {v['dot']} BV={v['BV']} NK={v['NK']} warps={v['warps']} "
        f"stages={stages} fuse={v['fuse']} halves={v.get('halves', 0)} "
        f"split_pt={v.get('split_pt', 0)}"
    )


# -- modes ---------------------------------------------------------------------------------


def compare(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> dict[str, float]:
    """Max relative error of each part (dH, dVn, dh0, then the fused totals when both have
    them), named."""
    names = (*PARTS, *FUSED_PARTS)
    return {n: max_rel_error(x, y) for n, x, y in zip(names, got, want)}


def check_one(
    inp: dict,
    shipped: tuple[torch.Tensor, ...],
    ref: tuple[torch.Tensor, ...],
    dw_shipped: torch.Tensor | None,
    var: dict[str, Any],
) -> dict[str, Any]:
    """One variant against the shipped scan (and, fused, the shipped dW) and the fp64 loop."""
    got = register_scan(
        inp,
        var["dot"],
        var["BV"],
        var["NK"],
        4,
        fuse=var["fuse"],
        halves=var.get("halves", 0),
        split_pt=var.get("split_pt", 0),
    )
    row: dict[str, Any] = dict(var)
    row["vs_shipped"] = compare(got[:3], shipped)
    ref_parts = ref if var["fuse"] else ref[:3]
    mine = (*got[:3], *fused_totals(got)) if var["fuse"] else got
    row["vs_fp64"] = compare(mine, ref_parts)
    if var["fuse"] and dw_shipped is not None:
        row["vs_shipped"]["dw"] = max_rel_error(fused_totals(got)[1], dw_shipped)
    row["worst"] = max(*row["vs_shipped"].values(), *row["vs_fp64"].values())
    return row


def check(dims: tuple[int, ...] = (32, 64), seq_len: int = 200) -> list[dict[str, Any]]:
    """Interpreter correctness of every (dot, BV, NK) at K = V in ``dims`` unfused, and of
    the fused partials for tf32x3 and ieee, in both forms (whole chunk and HALVES; warps do
    not matter to the interpreter). Not
    "bf16": the interpreter (Triton 3.9) returns garbage for a dot of values converted to
    bf16 (the forward prototype's docstring), so that variant is compiled only."""
    rows = []
    for dim in dims:
        inp = bwd_inputs(1, seq_len, 2, dim, dim, "cpu")
        shipped = shipped_scan(inp)
        ref = reference_scan(inp)
        dw_shipped = shipped_dw(inp, *shipped[:2])
        for halves, fuse, split_pt in (
            (0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0), (0, 0, 1), (0, 1, 1)
        ):  # fmt: skip
            for dot in (d for d in DOTS if d != "bf16" and (not fuse or d != "tf32")):
                for bv in (b for b in BLOCKS_V if b <= dim):
                    for nk in (n for n in SPLITS_K if dim // n >= 16):  # a dot needs 16 rows
                        var = {"K": dim, "V": dim, "T": seq_len, "dot": dot, "BV": bv, "NK": nk,
                               "fuse": fuse, "halves": halves,
                               "split_pt": split_pt}  # fmt: skip
                        row = check_one(inp, shipped, ref, dw_shipped, var)
                        print(
                            f"check K=V={dim} {dot:6} BV={bv:<2} NK={nk} fuse={fuse} "
                            f"halves={halves} split_pt={split_pt}: "
                            f"max rel err {row['worst']:.2e}",
                            flush=True,
                        )
                        rows.append(row)
    return rows


def record_variants(
    dims: tuple[int, ...], skip: frozenset[tuple] = frozenset()
) -> list[tuple[dict, dict]]:
    """(variant, launch record) for every variant whose key is not in ``skip``: one tiny
    interpreted launch each (T = 70, two chunks; T, NT and H are not specialized, so the
    record is the large shape's)."""
    from triton.runtime.interpreter import InterpretedFunction

    from kernelgate.sandbox.resources import LaunchRecorder

    out = []
    by_dim: dict[int, dict] = {}
    for var in variants(dims):
        if variant_key(var) in skip:
            continue
        if var["K"] not in by_dim:
            by_dim[var["K"]] = bwd_inputs(1, 70, 2, var["K"], var["V"], "cpu")
        recorder = LaunchRecorder()
        original_run = InterpretedFunction.run
        recorder.install(interpreter=True)
        try:
            register_scan(
                by_dim[var["K"]], var["dot"], var["BV"], var["NK"], var["warps"],
                var["stages"], var["fuse"], var["halves"], var["split_pt"],
            )  # fmt: skip
        finally:
            InterpretedFunction.run = original_run
        records = [r for r in recorder.drain() if r["name"] == "_bwd_scan_registers_kernel"]
        out.append((var, records[0]))
    return out


def compile_mode(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Offline sm_90 resources of every variant with each Triton installation, into
    ``report["compile"]``; in batches, the report rewritten to ``--out`` after each, so a
    run cut short keeps what it compiled. ``--resume``: the rows of the ``--out`` JSON are
    kept and only variants it lacks are compiled (rows from before the HALVES and SPLIT_PT
    forms get halves = 0 and split_pt = 0: that form's code is unchanged). (The forward
    prototype's compile_mode is bound to its own variants and file, so this is its twin, not
    a call to it.)"""
    sys.path.insert(0, str(ROOT / "benchmarks"))  # as the forward prototype's compile mode
    from _offline_compile import compile_offline, resource_fields, resource_text, triton_sites

    rows: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    previous = getattr(args, "previous", None)  # main reads it before --check rewrites --out
    if previous:
        rows = [
            {**r, "halves": r.get("halves", 0), "split_pt": r.get("split_pt", 0)}
            for r in previous.get("rows", [])
        ]
        timings = previous.get("compile_seconds", {})
    done = frozenset(variant_key(r) for r in rows)
    pairs = record_variants(tuple(args.dims), done)
    if args.limit:
        pairs = pairs[: args.limit]
    sites = triton_sites(args.triton36)
    report["compile"] = {
        "tritons": ["installed"] + ([args.triton36] if len(sites) > 1 else []),
        "variants": len(done) + len(pairs),
        "compile_seconds": timings,
        "rows": rows,
    }

    def one(site: str | None, batch: list[dict]) -> tuple[str, list[dict], float]:
        started = time.monotonic()
        version, results = compile_offline(batch, Path(__file__).resolve(), site)
        return version, results, time.monotonic() - started

    for start in range(0, len(pairs), args.batch):
        part = pairs[start : start + args.batch]
        records = [r for _, r in part]
        # the installations compile in parallel (one process each)
        with ThreadPoolExecutor(max_workers=len(sites)) as pool:
            compiled = list(pool.map(one, sites, [records] * len(sites)))
        for version, results, seconds in compiled:
            timings[version] = round(timings.get(version, 0.0) + seconds, 1)
            for (var, _), res in zip(part, results, strict=True):
                row = {"triton": version, **var, **resource_fields(res)}
                rows.append(row)
                print(f"triton {version:6} {label(var):50} {resource_text(row)}", flush=True)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"offline compile (s): {timings}")


VARIANT_KEYS = ("K", "V", "dot", "BV", "NK", "warps", "stages", "fuse", "halves", "split_pt")


def spill_free(compiled: dict[str, Any], dim: int = 128) -> list[dict[str, Any]]:
    """Variants at K = V = ``dim`` without spills and within sm_90's shared memory under
    every Triton the JSON lists (the others would not launch, or would time their spills).
    The forward prototype's spill_free knows no ``fuse`` key, hence this one."""
    verdict: dict[tuple, bool] = {}
    for row in compiled["rows"]:
        key = variant_key(row)
        ok = not row["spills"] and row.get("fits_shared", True)
        verdict[key] = verdict.get(key, True) and ok
    return [dict(zip(VARIANT_KEYS, key)) for key, ok in verdict.items() if ok and key[0] == dim]


def table(compiled: dict[str, Any]) -> str:
    """The compile rows as docs/kernels/gdn.md's markdown table: one line per (K, form,
    fuse, dot, BV, NK), its warps/stages settings (d = default stages) spill-free under every
    Triton, those of them within 227 KiB of shared memory, and ranges over the settings of
    spill stores (per Triton, in the JSON's order), registers and shared KiB."""
    versions = sorted({r["triton"] for r in compiled["rows"]}, reverse=True)
    groups: dict[tuple, list[dict]] = {}
    for row in compiled["rows"]:
        form = "halves" if row.get("halves") else "split P^T dO" if row.get("split_pt") else "whole"
        key = (row["K"], form, row["fuse"], row["dot"], row["BV"], row["NK"])
        groups.setdefault(key, []).append(row)

    def span(values: list[int]) -> str:
        return f"{min(values)}" if min(values) == max(values) else f"{min(values)}-{max(values)}"

    lines = [
        "| K=V | form | fuse | dot | BV | NK | no spills under "
        + " and ".join(versions)
        + " (warps/stages) | of those, within 227 KiB shared | spill stores, bytes, "
        + "; ".join(versions)
        + " | registers | shared KiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, rows in groups.items():
        settings: dict[tuple, list[dict]] = {}
        for row in rows:
            settings.setdefault((row["warps"], row["stages"]), []).append(row)
        clean = [s for s, rs in settings.items() if not any(r["spills"] for r in rs)]
        fits = [s for s in clean if all(r["fits_shared"] for r in settings[s])]

        def names(chosen: list[tuple], settings: dict = settings, full: bool = True) -> str:
            if not chosen:
                return f"none of {len(settings)}" if full else ""
            if len(chosen) == len(settings) and len(chosen) > 1:
                return f"all {len(chosen)}"
            return ", ".join(f"{w}/{'d' if st is None else st}" for w, st in chosen)

        spills = "; ".join(
            span([r["spill_store_bytes"] or 0 for r in rows if r["triton"] == v]) for v in versions
        )
        fits_text = (
            "-" if not clean else "the same" if fits == clean else names(fits, full=False) or "none"
        )
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} "
            f"| {key[5]} | {names(clean)} | {fits_text} | {spills} "
            f"| {span([r['registers'] or 0 for r in rows])} "
            f"| {span([round((r['shared_bytes'] or 0) / 1024) for r in rows])} |"
        )
    return "\n".join(lines)


def parse_variant(text: str, dim: int) -> dict[str, Any]:
    """DOT:BV:NK:WARPS:STAGES[:FUSE[:HALVES[:SPLIT_PT]]] (STAGES a number or "default") at
    K = V = ``dim``."""
    fields = text.split(":")
    if not 5 <= len(fields) <= 8:
        raise ValueError(f"a variant is DOT:BV:NK:WARPS:STAGES[:FUSE[:HALVES[:SPLIT_PT]]], "
                         f"got {text!r}")  # fmt: skip
    dot, bv, nk, warps, stages = fields[:5]
    fuse, halves, split_pt = (int(x) for x in [*fields[5:], "0", "0", "0"][:3])
    return {"K": dim, "V": dim, "dot": dot, "BV": int(bv), "NK": int(nk), "warps": int(warps),
            "stages": None if stages == "default" else int(stages), "fuse": fuse,
            "halves": halves, "split_pt": split_pt}  # fmt: skip


def time_mode(args: argparse.Namespace) -> dict[str, Any]:
    """Device timing of the chosen variants against the shipped scan (and the whole shipped
    backward, for context: a fused variant also does part of _qk_bwd_kernel's work), with a
    check of dH, dVn and dh0 against the shipped kernel. ``args.dry``: the same path under
    the CPU interpreter at a tiny shape, every launch run once (no do_bench)."""
    dry = bool(getattr(args, "dry", False))
    if dry:
        if os.environ.get("TRITON_INTERPRET") != "1":
            sys.exit("--time --dry runs under TRITON_INTERPRET=1 (set by the script's main)")
        device, batch, heads, dim, lengths = "cpu", 1, 2, 32, (70, 130)

        def bench(fn: Callable[[], Any]) -> float:
            started = time.perf_counter()
            fn()
            return (time.perf_counter() - started) * 1e3

    else:
        if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
            sys.exit("--time needs a CUDA device (and TRITON_INTERPRET unset); none is available")
        from triton.testing import do_bench as bench

        device, batch, heads, dim, lengths = "cuda", 2, 16, 128, (4096, 16384)
    chosen = []  # --from's spill-free variants, then --variants (both may be given)
    if args.from_json:
        chosen += spill_free(json.loads(Path(args.from_json).read_text())["compile"])
    for text in args.variants or ():
        var = parse_variant(text, 128)
        if variant_key(var) not in {variant_key(v) for v in chosen}:
            chosen.append(var)
    if dry:  # the same variants at the tiny head size (BV and NK within it)
        chosen = [
            {**v, "K": dim, "V": dim, "BV": min(v["BV"], dim), "NK": min(v["NK"], dim // 16)}
            for v in chosen
        ]
    rows: list[dict[str, Any]] = []
    for seq_len in lengths:
        inp = bwd_inputs(batch, seq_len, heads, dim, dim, device)
        want = shipped_scan(inp)
        ms = bench(lambda inp=inp: shipped_scan(inp))
        rows.append({"T": seq_len, "variant": "shipped _state_bwd_kernel", "ms": ms})
        print(f"T={seq_len} shipped _state_bwd_kernel: {ms:.3f} ms", flush=True)
        if not dry:  # the interpreter would take minutes over the six kernels
            ms = bench(lambda inp=inp: shipped_backward(inp))
            rows.append({"T": seq_len, "variant": "shipped backward (six kernels)", "ms": ms})
            print(f"T={seq_len} shipped backward (six kernels): {ms:.3f} ms", flush=True)
        for var in chosen:

            def run(inp: dict = inp, var: dict = var) -> tuple:
                return register_scan(
                    inp, var["dot"], var["BV"], var["NK"], var["warps"], var["stages"],
                    var["fuse"], var["halves"], var["split_pt"],
                )  # fmt: skip

            err = compare(run()[:3], want)
            ms = bench(run)
            rows.append({"T": seq_len, "variant": label(var), **var, "ms": ms, "vs_shipped": err})
            worst = max(err.values())
            print(f"T={seq_len} {label(var)}: {ms:.3f} ms, max rel err {worst:.2e}", flush=True)
    return {
        "device": "CPU interpreter (--dry)" if dry else torch.cuda.get_device_name(),
        "shape": f"B={batch}, H={heads}, K=V={dim}, fp32 inputs",
        "rows": rows,
    }


def shipped_backward(inp: dict) -> tuple[torch.Tensor, ...]:
    """The shipped six-kernel backward (chunk.py) on the same saved forward tensors."""
    q, k, v, do = inp["q"], inp["k"], inp["v"], inp["do"]
    batch, seq_len, heads, _ = q.shape
    g = torch.zeros(batch, seq_len, heads, device=q.device)  # only its shape and dtype are read
    saved = (inp["g_cum"], inp["a_inv"], inp["w"], inp["states"], inp["v_new"], inp["scores"])
    return gdn_chunk.chunk_gated_delta_rule_bwd(
        q, k, v, g, inp["beta"], inp["scale"], True, saved, do, inp["dht"]
    )


def main() -> None:
    """Parse the modes; --time alone (it runs without the interpreter, unless --dry)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="interpreter correctness")
    parser.add_argument("--compile", action="store_true", help="offline sm_90 resources")
    parser.add_argument("--time", action="store_true", help="CUDA timing (a device run)")
    parser.add_argument("--dry", action="store_true", help="--time on the CPU interpreter")
    parser.add_argument("--triton36", default="/tmp/tr36site", help="folder holding Triton 3.6")
    parser.add_argument("--dims", type=int, nargs="+", default=[128, 64], help="K = V compiled")
    parser.add_argument("--from", dest="from_json", help="--time: the compile JSON")
    parser.add_argument(
        "--variants",
        nargs="+",
        help="--time: DOT:BV:NK:WARPS:STAGES[:FUSE[:HALVES[:SPLIT_PT]]] (STAGES: N or default), "
        "after --from's",
    )
    parser.add_argument("--batch", type=int, default=8, help="records per compile process")
    parser.add_argument("--limit", type=int, default=0, help="--compile: the first N only")
    parser.add_argument(
        "--resume", action="store_true", help="--compile: keep --out's rows, add the missing"
    )
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--table", type=Path, help="print a compile JSON as a markdown table")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())["compile"]))
        return
    args.previous = None
    if args.resume and args.out and args.out.exists():
        args.previous = json.loads(args.out.read_text()).get("compile")
    if not (args.check or args.compile or args.time):
        parser.error("give --check, --compile and/or --time")
    if args.time and (args.check or args.compile):
        parser.error("--time runs without the interpreter: give it alone")
    if args.dry and not args.time:
        parser.error("--dry goes with --time")
    if args.time and not (args.from_json or args.variants):
        parser.error("--time needs --from JSON or --variants")
    report: dict[str, Any] = {
        "what": "register-resident GDN backward state-gradient scan prototypes (benchmarks/"
        "gdn_bwd_scan_registers.py): correctness and offline sm_90 resources",
        "command": "PYTHONPATH=src python "
        + " ".join(["benchmarks/gdn_bwd_scan_registers.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if args.time:
        report["time"] = time_mode(args)
    else:
        report["device"] = "offline sm_90 compile (no GPU); correctness under TRITON_INTERPRET=1"
    if args.check:
        report["check"] = check()
        if args.out:
            args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.compile:
        compile_mode(args, report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
