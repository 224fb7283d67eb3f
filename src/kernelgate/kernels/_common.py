"""What the Python wrappers of the gated linear recurrence family (gdn, delta_rule, gla, kda,
mamba2) do alike around their kernels, written once.

Each member's chunk.py keeps what is its own (its kernels' launch arguments, its gates, its
saved intermediates); what is here is the plumbing every member must do the same way for the
family's contracts to hold alike: tile widths, 16-byte-aligned operands (one compiled
specialization per shape, the one the offline sm_90 compile checks), the fp32 state buffers,
the query-scale default, the 16-bit policy of kernels/_precision.py and the dtype the
initial state's gradient is returned in. Nothing here is @triton.jit code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton

from kernelgate.kernels import _precision


def tile_width(dim: int, cap: int) -> int:
    """Power-of-two tile width covering ``dim`` (tl.dot needs at least 16), at most ``cap``."""
    return min(max(16, triton.next_power_of_2(dim)), cap)


def round_up(dim: int, block: int) -> int:
    """``dim`` rounded up to whole tiles: the stop of a kernel's tile loop. Passed instead of
    a tile count because Triton compiles an integer argument equal to 1 as a constant, which
    folds a one-tile loop away, and an fp32 dot outside a loop spills on sm_90."""
    return triton.cdiv(dim, block) * block


def aligned(x: torch.Tensor) -> torch.Tensor:
    """``x`` contiguous and 16-byte aligned (a copy only where it is not). Triton specializes
    a kernel on each pointer's 16-byte alignment: a misaligned view (a storage offset) gets
    scalar loads and a differently compiled kernel, and gdn's ``_wy_fwd_kernel`` spills on
    sm_90 that way (the 48 bytes of local memory RES-02 saw on the H200; offline: a 40-48 byte
    stack frame holding 36-52 bytes of spill stores). With aligned inputs every layout runs
    the specialization the offline sm_90 compile checks."""
    x = x.contiguous()
    return x if x.data_ptr() % 16 == 0 else x.clone()


def fp32_state(state: torch.Tensor | None) -> torch.Tensor | None:
    """An incoming state (initial_state in the forward, the final state's gradient dht in the
    backward) as the kernels read it: fp32 whatever the caller's dtype, since the recurrence
    state is kept in fp32, and aligned; None stays None (the kernel's HAS_ flag is off)."""
    return aligned(state.float()) if state is not None else None


def state_buffer(wanted: bool, shape: tuple[int, ...], device: torch.device) -> torch.Tensor | None:
    """An fp32 buffer for a state the kernels write (the final state, dh0) when it is
    ``wanted``, else None: the kernels store it only under their STORE_ flag."""
    return torch.empty(shape, device=device, dtype=torch.float32) if wanted else None


def default_scale(scale: float | None, q: torch.Tensor) -> float:
    """The query scale passed to the kernels: ``K ** -0.5`` of the caller's K unless given, as
    a Python float (a kernel scalar argument, never a tensor)."""
    return float(q.shape[-1] ** -0.5 if scale is None else scale)


def kernel_inputs(*inputs: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The caller's tensors as the kernels compute from them: through the family's one 16-bit
    policy (_precision.compute_inputs, read at every call so that SIXTEEN_BIT_COMPUTE switches
    every member) and then aligned; None (an optional input not given) stays None. The
    conversions are autograd ops, so the caller's tensors get gradients of their own dtypes."""
    return tuple(aligned(x) if x is not None else None for x in _precision.compute_inputs(*inputs))


def remember_initial_state(ctx: torch.autograd.function.FunctionCtx, initial_state) -> None:
    """Note on ``ctx`` whether an initial state was given and its dtype: the backward computes
    dh0 only then, in fp32, and returns it in that dtype (autograd requires a gradient of its
    input's dtype; the state itself is used in fp32)."""
    ctx.initial_state_dtype = initial_state.dtype if initial_state is not None else None


def has_initial_state(ctx: torch.autograd.function.FunctionCtx) -> bool:
    """Whether the forward saved by ``remember_initial_state`` was given an initial state."""
    return ctx.initial_state_dtype is not None


def initial_state_grad(
    ctx: torch.autograd.function.FunctionCtx, dh0: torch.Tensor | None
) -> torch.Tensor | None:
    """The kernels' fp32 dh0 in the initial state's dtype (None when there was none)."""
    return dh0.to(ctx.initial_state_dtype) if dh0 is not None else None


def recurrence_forward(
    ctx: torch.autograd.function.FunctionCtx,
    launch_fwd: Callable,
    inputs: tuple[torch.Tensor, ...],
    scale: float,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The forward of a member's autograd Function whose launchers take (inputs, scale,
    initial state, flag) (gdn, GLA, KDA): run ``launch_fwd``, which returns (o, final state,
    the intermediates its backward reads), and keep on ``ctx`` what recurrence_backward needs:
    the inputs, those intermediates, the scale and the initial state's presence and dtype."""
    o, final_state, saved = launch_fwd(*inputs, scale, initial_state, output_final_state)
    ctx.save_for_backward(*inputs, *saved)
    ctx.num_inputs = len(inputs)
    ctx.scale = scale
    remember_initial_state(ctx, initial_state)
    return o, final_state


def recurrence_backward(
    ctx: torch.autograd.function.FunctionCtx,
    launch_bwd: Callable,
    do: torch.Tensor,
    dht: torch.Tensor | None,
) -> tuple[torch.Tensor | None, ...]:
    """The backward matching recurrence_forward: ``launch_bwd(*inputs, scale, has initial
    state, intermediates, do, dht)`` on an aligned do (autograd's incoming gradient may be
    any view); returns the gradient of every input, then dh0 in the initial state's dtype."""
    tensors = ctx.saved_tensors
    inputs, saved = tensors[: ctx.num_inputs], list(tensors[ctx.num_inputs :])
    *grads, dh0 = launch_bwd(*inputs, ctx.scale, has_initial_state(ctx), saved, aligned(do), dht)
    return (*grads, initial_state_grad(ctx, dh0))


def apply_recurrence(
    function: type[torch.autograd.Function],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *gates: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The body of a q, k, v member's public function after its shape checks (gdn,
    delta_rule, GLA, KDA): the scale default, the inputs as the kernels compute from them
    (kernel_inputs), ``function.apply(q, k, v, *gates, scale, initial_state,
    output_final_state)``, and o returned in v's dtype (the final state stays fp32)."""
    scale = default_scale(scale, q)
    out_dtype = v.dtype
    inputs = kernel_inputs(q, k, v, *gates)
    o, final_state = function.apply(*inputs, scale, initial_state, output_final_state)
    return o.to(out_dtype), final_state


# ------------------------------------------------------------------------- input checks
# The members' messages differ in small ways that callers and docs may quote (GLA and KDA
# prefix their function's name and print shapes as tuples; Gated DeltaNet prints torch.Size),
# so the checks take the prefix and the shape formatting and keep each member's words.


def check_qkv(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    prefix: str = "",
    shape_text: Callable[[torch.Size], object] = tuple,
) -> None:
    """q, k [B, T, H, K] of one shape and v [B, T, H, V] of q's B, T, H."""
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"{prefix}expected q, k [B,T,H,K] and v [B,T,H,V], got "
            f"{shape_text(q.shape)}, {shape_text(k.shape)}, {shape_text(v.shape)}"
        )


def check_head_dim(q: torch.Tensor, max_head_dim_k: int, prefix: str = "") -> None:
    """K within what the member's kernels are verified for."""
    if q.shape[-1] > max_head_dim_k:
        raise ValueError(f"{prefix}K = {q.shape[-1]} > {max_head_dim_k} is not supported")


def check_length(x: torch.Tensor, prefix: str = "") -> None:
    """At least one step (dimension 1, T, of a [B, T, ...] input)."""
    if x.shape[1] < 1:
        raise ValueError(f"{prefix}T must be at least 1")


def check_initial_state(
    initial_state: torch.Tensor | None, expected: tuple[int, ...], prefix: str = ""
) -> None:
    """An initial state, when given, of the ``expected`` [B, H, rows, columns] shape."""
    if initial_state is not None and tuple(initial_state.shape) != expected:
        raise ValueError(
            f"{prefix}expected initial_state {expected}, got {tuple(initial_state.shape)}"
        )
