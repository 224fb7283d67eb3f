"""The red-team catalog: one declarative entry per defect class and per positive control.

Each defective entry names the KernelBench reference it claims to implement, the candidate
file, the gate(s) of DESIGN.md that must reject it, and, when the Triton interpreter cannot
express the defect (no TF32, sequential programs, no streams, no register allocator), the
reason it only runs on a device. Entries are data, not code paths: calibration, tests and
docs all read this one list, so a new defect is one file plus one entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent

SEQUENTIAL = (
    "the Triton interpreter runs program instances one after another, so the race always "
    "resolves the same way and the values come out right"
)


@dataclass(frozen=True)
class Entry:
    """One red-team kernel (``intended_gates`` or ``intended_rules`` non-empty) or positive
    control (both empty).

    Most defects are numerically wrong somewhere, so a gate must reject them. Some are right
    everywhere and wrong as a kernel (an eager port with a fig-leaf kernel): only a rule of
    the verdict (docs/rules.md) can reject those, so an entry may name rules as its intended
    catchers; the runner puts every rule an entry names (``rules_in_force``) in force for its
    verification, as ``verify --min-authored-share`` would.
    """

    name: str
    reference: str  # file stem under references/
    candidate: str  # path under the redteam package, e.g. "defects/cache_by_shape.py"
    defect: str = ""  # one line: what is wrong ("" for a control)
    intended_gates: tuple[str, ...] = ()
    device_only: str | None = None  # why the interpreter cannot judge it, or None
    cpu_only: str | None = None  # why only the interpreter's access trace can, or None
    intended_rules: tuple[str, ...] = ()  # rules that must reject it (AUTH-01)
    # rules in force for a control that must pass them too (a defect's intended_rules are)
    judged_by_rules: tuple[str, ...] = ()

    @property
    def reference_path(self) -> Path:
        return ROOT / "references" / f"{self.reference}.py"

    @property
    def candidate_path(self) -> Path:
        return ROOT / self.candidate

    @property
    def is_control(self) -> bool:
        return not self.intended_gates and not self.intended_rules

    @property
    def intended(self) -> tuple[str, ...]:
        """Every gate and rule that may reject the defect and count as caught."""
        return (*self.intended_gates, *self.intended_rules)

    @property
    def rules_in_force(self) -> tuple[str, ...]:
        """Rules its verification puts in force (off by default for a KernelBench pair)."""
        return (*self.intended_rules, *self.judged_by_rules)


def _d(
    name: str,
    reference: str,
    defect: str,
    gates: tuple[str, ...],
    device_only: str | None = None,
    cpu_only: str | None = None,
) -> Entry:
    return Entry(name, reference, f"defects/{name}.py", defect, gates, device_only, cpu_only)


def _c(
    name: str, reference: str, candidate: str | None = None, device_only: str | None = None
) -> Entry:
    return Entry(name, reference, f"controls/{candidate or name}.py", device_only=device_only)


# The files of issue 20's entries are what examples/<reference>/ shows: the examples there
# are links to these files (the package must carry them so calibrate runs installed);
# tests/test_examples_issue20.py checks each example is an entry with its verdict.
INTERPRETER_BF16 = (
    "the Triton interpreter rounds float32 to bf16 by truncation and stores garbage for "
    "bf16 subnormals (3e-41 comes back as 3.58e-39), so EXC-02 sees classes the kernel "
    "does not produce on a device; and the CPU's SDPA makes every query NaN for a NaN in "
    "v (0 x NaN in p @ v), where a flash kernel skips the key blocks after the query's"
)


DEFECTS: tuple[Entry, ...] = (
    _d(
        "cache_by_shape",
        "softmax",
        "answer cached in a dict keyed by the input shape",
        ("ORD-02", "CMP-01"),
    ),
    _d(
        "cache_by_data_ptr",
        "vector_add",
        "answer cached keyed by the inputs' data pointers",
        ("ORD-02", "CMP-01"),
    ),
    _d(
        "returns_input", "relu", "returns its input tensor instead of relu(x)", ("CMP-01", "MEM-01")
    ),
    _d(
        "zeros_for_tiny_output",
        "residual_scale",
        "returns zeros: passes allclose(atol=1e-2) because |out| < 1e-2",
        ("CMP-01",),
    ),
    _d("nan_to_num", "gelu", "nan_to_num on the input: NaN and Inf become finite", ("EXC-01",)),
    _d(
        "where_isnan",
        "row_sum",
        "where(x != x, 0, x) before summing: NaN rows sum to a finite value",
        ("EXC-01",),
    ),
    _d("inf_clamped", "relu", "clamps to +-FLT_MAX: +Inf comes out finite", ("EXC-01",)),
    _d(
        "softmax_no_max_subtraction",
        "softmax",
        "exp(x) / sum(exp(x)) without subtracting the row max: inf/inf = NaN on large inputs",
        ("EXC-01", "CMP-01"),
    ),
    _d(
        "fp16_accumulator",
        "row_sum",
        "row sum accumulated in fp16 behind fp32 inputs and outputs",
        ("PRC-02",),
    ),
    _d(
        "truncated_mantissa_loads",
        "row_sum",
        "row sum of inputs cut to 13 fraction bits, accumulated in fp32 (~3x the order bound)",
        ("PRC-02", "CMP-01", "CMP-03"),
    ),
    _d("bf16_downcast", "gelu", "computes in bf16 behind fp32 I/O", ("PRC-01", "CMP-01")),
    _d(
        "tf32_matmul",
        "matmul",
        "tl.dot with TF32 products where IEEE fp32 is promised",
        ("PRC-01",),
        "the Triton interpreter has no TF32: tl.dot ignores input_precision and computes in "
        "IEEE fp32",
    ),
    _d(
        "hardcoded_shape",
        "softmax",
        "row length read from a module constant (300): right only at the benchmark shape",
        ("CMP-03",),
    ),
    _d(
        "tail_mask_drops_remainder",
        "vector_add",
        "mask offs < n - n % BLOCK: the tail is dropped unless n is a multiple of BLOCK",
        ("CMP-03",),
    ),
    _d(
        "oob_read",
        "row_sum",
        "unmasked load of a power-of-two block: reads past the row and past the buffer end",
        ("MEM-01", "CMP-01"),
    ),
    _d(
        "unwritten_tail",
        "softmax",
        "grid of rows // 4 with 4 rows per program: the last rows of torch.empty stay unwritten",
        ("MEM-01",),
    ),
    _d(
        "reuse_freed_result",
        "softmax",
        "returns torch.empty_like without computing, hoping to get the reference's freed output",
        ("MEM-01", "CMP-01"),
    ),
    _d("mutated_input", "softmax", "uses the input buffer as scratch for x - max", ("MEM-01",)),
    _d(
        "atomic_add_reduction",
        "row_sum",
        "row sum split over programs, combined with float atomic_add in arbitrary order",
        ("ORD-02",),
        SEQUENTIAL,
    ),
    _d(
        "write_write_race",
        "row_sum",
        "non-atomic load-add-store of partial sums from several programs into one output",
        ("ORD-02", "CMP-01", "RES-01"),
    ),
    # issue 24, part 3: what only the interpreter's access trace (RES-01) sees in CPU mode
    _d(
        "oob_tail_read",
        "relu",
        "load without the tail mask its store has: the last block reads past the input",
        ("RES-01",),
        cpu_only=(
            "the lanes past the input read its guard band, inside the allocation, and are "
            "never stored: memcheck sees no error and every value is right"
        ),
    ),
    _d(
        "tile_overlap_race",
        "relu",
        "store mask off by one: each program also writes the next block's first element",
        ("RES-01", "CMP-01", "ORD-02"),
    ),
    _d(
        "uninitialised_scratch_read",
        "row_sum",
        "second pass loads every slot of a torch.empty scratch, half of them never written",
        ("RES-01",),
        cpu_only=(
            "the worker fills every allocation with poison, so initcheck sees the unwritten "
            "slots as initialised, and tl.where discards them: every value is right"
        ),
    ),
    _d(
        "dropped_scale",
        "scaled_softmax",
        "forgets the head_dim**-0.5 scale before the softmax",
        ("CMP-01",),
    ),
    _d(
        "single_block",
        "row_sum",
        "one block of 1024 per row: wrong once the row is longer than the block",
        ("CMP-03",),
    ),
    _d(
        "contiguous_only",
        "softmax",
        "indexes rows with the logical width as stride, without .contiguous()",
        ("CMP-02",),
    ),
    _d(
        "misaligned_vector_load",
        "relu",
        "rounds the start address down to 16 bytes, as a float4 load does",
        ("CMP-02",),
    ),
    _d("flush_subnormals", "relu", "flushes subnormal results to zero", ("EXC-02",)),
    _d(
        "stale_first_call_state",
        "layernorm",
        "mean and variance computed on the first call and reused on every later call",
        ("ORD-02", "CMP-01"),
    ),
    _d(
        "side_stream_unsynchronized",
        "softmax",
        "launches on a side CUDA stream and returns without synchronising",
        ("CMP-01", "MEM-01", "ORD-02"),
        "CPU mode has no CUDA streams: the interpreter runs the launch synchronously",
    ),
    _d(
        "output_aliases_input",
        "relu",
        "relu computed in place into the input and the input returned",
        ("MEM-01",),
    ),
    _d(
        "batch_ignored",
        "batched_softmax",
        "processes batch 0 only: right at the benchmark's batch of 1",
        ("CMP-03",),
    ),
    _d(
        "causal_off_by_one",
        "causal_softmax",
        "causal mask j < i instead of j <= i: the diagonal is masked out",
        ("CMP-01",),
    ),
    _d(
        "stochastic_rounding",
        "gelu",
        "stochastic rounding to bf16 with a fresh seed per call",
        ("ORD-02", "PRC-01"),
    ),
    _d(
        "register_spills",
        "relu",
        "maxnreg=32 on a 2048-wide tile in one warp: live floats per thread spill",
        ("RES-02",),
    ),
    _d(
        "drops_last_partial_block",
        "row_sum",
        "loops over n // BLOCK full blocks and drops the partial last block",
        ("ORD-01", "CMP-01"),
    ),
    _d(
        "wrong_output_dtype",
        "matmul_fp16",
        "returns fp32 where the reference returns fp16",
        ("PRC-01", "CMP-01"),
    ),
    _d(
        "signed_zero_lost",
        "residual_scale",
        "x * scale + 0.0 (a fused bias add left over): -0.0 comes back as +0.0",
        ("EXC-02",),
    ),
    # issue 17, item 2: sparse special values
    _d(
        "unguarded_logsumexp",
        "linear_logsumexp",
        "log-sum-exp subtracts an infinite row max: NaN where torch.logsumexp gives +Inf",
        ("EXC-01",),
    ),
    # issue 17, item 3: outputs reused across calls
    _d(
        "static_output_buffer",
        "vector_add",
        "writes each answer into one output buffer per shape and returns that buffer every call",
        ("ORD-02",),
    ),
    _d(
        "cuda_graph_static_output",
        "softmax",
        "replays a captured CUDA graph and returns its static output buffer on every call",
        ("ORD-02",),
        "CPU mode has no CUDA graphs: torch.cuda.CUDAGraph needs a CUDA device to capture and "
        "replay",
    ),
    _d(
        "lazy_output",
        "softmax",
        "returns a tensor subclass that runs its softmax kernel when read, from the caller's "
        "input buffer: the caller's result changes when it reuses that buffer",
        ("ORD-02",),
    ),
    _d(
        "previous_output_as_workspace",
        "softmax",
        "writes row statistics into the output it returned on the previous call (as scratch)",
        ("ORD-02",),
    ),
    # issue 17, item 5: signed zeros whose sign is not defined
    _d(
        "relu_bias_zero_sign",
        "relu_mul_add",
        "relu(a) * b + c + 0.0: the -0.0 results IEEE fixes (not those of relu(-0.0)) come "
        "back as +0.0",
        ("EXC-02",),
    ),
    _d(
        "row_max_plus_zero",
        "short_row_max",
        "max(row) + 0.0: a row max of -0.0 with no +0.0 in the row (a sign IEEE fixes) comes "
        "back as +0.0",
        ("EXC-02",),
    ),
    # issue 17, item 4: timing-adversarial instances
    _d(
        "timed_fp16_path",
        "matmul",
        "times an fp32 and an fp16 matmul on its first call and keeps the faster",
        ("CMP-01",),
    ),
    _d(
        "autotune_bad_config",
        "row_sum",
        "autotuned over three configs; the middle one masks its unrolled half with the "
        "first half's mask",
        ("CMP-01",),
    ),
    _d(
        "first_call_differs",
        "row_sum",
        "first call sums with torch.sum, later calls with a blocked Triton kernel",
        ("ORD-02",),
    ),
    # issue 17, item 1: dims whose probe fails, and sizes that shape only parameters
    _d(
        "batch_baked_into_view",
        "linear_batchnorm",
        "batch statistics over h.view(8, features, -1): the benchmark's batch size baked in "
        "(the reference's BatchNorm raises at batch 1)",
        ("CMP-03",),
    ),
    _d(
        "hidden_baked_into_kernel",
        "mlp_hidden",
        "fused MLP with one block of 16 hidden units (the benchmark's hidden width), no loop",
        ("CMP-03",),
    ),
    # issue 20, part 4: low-precision and index-output kernels (examples/ holds the same files)
    _d(
        "topk_flat_indices",
        "topk",
        "top-k values right, indices stored as offsets into the flattened input",
        ("CMP-01",),
    ),
    _d(
        "topk_unsorted_ties",
        "topk",
        "the right k elements with ties, written in column order where sorted=True is asked",
        ("CMP-01",),
    ),
    _d(
        "w4a16_swapped_nibbles",
        "w4a16_linear",
        "int4 GEMM that takes the high nibble for the even column and the low for the odd",
        ("CMP-01",),
    ),
    _d(
        "w4a16_wrong_group_index",
        "w4a16_linear",
        "int4 GEMM whose scale group is the packed byte index // group, not the column's",
        ("CMP-01",),
    ),
    _d(
        "fp8_dropped_scale",
        "fp8_linear",
        "fp8 GEMM epilogue that forgets the per-channel weight scale",
        ("CMP-01",),
    ),
    _d(
        "fp8_bf16_activations",
        "fp8_linear",
        "fp8 GEMM that rounds the scaled activations to bf16 before the float32 product",
        ("CMP-01",),
    ),
    _d(
        "attention_unmasked_last_block",
        "causal_attention",
        "flash attention without the causal mask on the last (diagonal) key block",
        ("CMP-01",),
    ),
    _d(
        "attention_fp16_accumulation",
        "causal_attention",
        "flash attention with scores and accumulator in fp16 behind bf16 I/O (Inf past 65504)",
        ("CMP-01",),
    ),
    # issue 21: right everywhere, so every gate passes; not a kernel, so a rule rejects it
    Entry(
        "fig_leaf_kernel",
        "mlp_wide",
        "defects/fig_leaf_kernel.py",
        "eager MLP port: GEMMs, ReLU and bias adds in torch; one token Triton kernel copies a bias",
        intended_rules=("AUTH-01",),
    ),
)

CONTROLS: tuple[Entry, ...] = (
    _c("vector_add", "vector_add"),
    _c("relu", "relu"),
    _c("gelu", "gelu"),
    _c("residual_scale", "residual_scale"),
    _c("softmax", "softmax"),
    _c("online_softmax", "softmax"),
    _c("scaled_softmax", "scaled_softmax"),
    _c("causal_softmax", "causal_softmax"),
    _c("batched_softmax", "batched_softmax"),
    _c("row_sum", "row_sum"),
    _c("row_mean", "row_mean"),
    _c("row_max", "row_max"),
    _c("layernorm", "layernorm"),
    _c("rmsnorm", "rmsnorm"),
    _c("matmul", "matmul"),
    _c("matmul_fp16", "matmul_fp16"),
    _c("cross_entropy", "cross_entropy"),
    _c("side_stream_joined", "softmax"),
    _c("torch_softmax", "softmax"),
    _c("torch_layernorm", "layernorm"),
    _c("torch_matmul", "matmul"),
    _c("torch_cross_entropy", "cross_entropy"),
    _c("torch_row_sum", "row_sum"),
    # issue 17, item 2: sparse special values
    _c("linear_logsumexp", "linear_logsumexp"),
    # issue 17, item 3: outputs reused across calls
    _c("workspace_reused", "softmax"),
    # issue 17, item 5: signed zeros whose sign is not defined
    _c("relu_mul_add_cuda_relu", "relu_mul_add"),
    _c("relu_mul_add_cpu_relu", "relu_mul_add"),
    _c("short_row_max", "short_row_max"),
    # issue 17, item 4: timing-adversarial instances
    _c("timed_block_size", "vector_add"),
    _c("autotuned_elementwise", "residual_scale"),
    # issue 17, item 1: dims whose probe fails, and sizes that shape only parameters
    _c("linear_batchnorm", "linear_batchnorm"),
    _c("mlp_hidden", "mlp_hidden"),
    # issue 20, part 4
    _c("topk", "topk"),
    _c("w4a16_linear", "w4a16_linear"),
    _c("fp8_linear", "fp8_linear"),
    # issue 24, part 3: atomics and scratch the access trace must not reject
    _c("atomic_row_sum", "row_sum"),
    _c("scratch_two_pass", "row_sum"),
    _c("causal_attention", "causal_attention", device_only=INTERPRETER_BF16),
    # issue 21: an authored kernel beside a library GEMM, judged with AUTH-01 in force
    Entry(
        "authored_with_cublas_gemm",
        "gated_softmax",
        "controls/authored_with_cublas_gemm.py",
        judged_by_rules=("AUTH-01",),
    ),
)


def entries(only: list[str] | tuple[str, ...] | None = None) -> list[Entry]:
    """Defects then controls, restricted to ``only`` (names) when given; unknown names raise."""
    every = [*DEFECTS, *CONTROLS]
    if not only:
        return every
    known = {e.name for e in every}
    unknown = sorted(set(only) - known)
    if unknown:
        raise KeyError(
            f"unknown red-team entr{'y' if len(unknown) == 1 else 'ies'}: {', '.join(unknown)}"
        )
    return [e for e in every if e.name in set(only)]
