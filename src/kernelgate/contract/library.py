"""The built-in contract library: declarative, OpInfo-like entries for common ops.

Each entry is data, not a code path. It says which aten op sequence identifies the op (what
the reference calls once views and copies are set aside), which error model judges it and
how that model's inputs are obtained (``magnitude`` names a recipe in ``contract.match``;
the reduction length ``N`` is read from the arguments of ``reduction_op``), which dtypes
and layouts the op admits, and what its dims mean. A reference whose forward calls exactly
one entry's ops gets that entry's contract (``contract.match.library_contract``), with
provenance ``library``; anything else is derived from the reference as before.

Why a library at all: a derived contract only knows what the reference did at one dtype
and one layout; for a known op we know more (it is defined for fp16 and bf16, any strided
view, and its rounding error follows a first-principles model), so the contract can
promise more and the gates can check more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelgate.contract.spec import Layout

FLOAT_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
ALL_LAYOUTS: tuple[Layout, ...] = tuple(Layout)
# Reductions keep a contiguous-or-strided reading of the reduced axis; broadcasting an
# input of a reduction is legal but rarely meant, so only the elementwise ops admit it.
REDUCTION_LAYOUTS: tuple[Layout, ...] = (
    Layout.CONTIGUOUS,
    Layout.OFFSET,
    Layout.STRIDED,
    Layout.TRANSPOSED,
)


@dataclass(frozen=True)
class LibraryEntry:
    """One op of the library.

    ``signatures``: aten op sequences (overload names stripped, views and copies ignored)
    any of which identifies the op. ``error_model``: ``elementwise`` or ``order``.
    ``magnitude``: the recipe that gives the per-output scale the bound is relative to
    (``output`` = |ref|; ``abs-linear`` = the op evaluated on absolute values in fp64, the
    sum of |terms|; ``input-abs`` = |ref| + |x| for ops whose honest implementations lose
    absolute, not relative, accuracy; ``log-normalizer``; ``softmax-arguments`` = |ref| plus
    the error exp makes of its rounded shifted arguments; ``layer-norm``).
    ``reduction_op``: the op whose arguments give N (None for elementwise ops).
    ``tf32_default``: PyTorch's own default for this op on CUDA uses TF32 (cuDNN
    convolution), so the order term uses TF32's unit roundoff for the products.
    """

    name: str
    signatures: tuple[tuple[str, ...], ...]
    error_model: str
    magnitude: str
    reduction_op: str | None = None
    dtypes: tuple[str, ...] = FLOAT_DTYPES
    layouts: tuple[Layout, ...] = ALL_LAYOUTS
    dims: str = "elementwise: output has the broadcast shape of the inputs"
    tf32_default: bool = False
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def reduces(self) -> bool:
        return self.reduction_op is not None


def _unary(name: str, op: str, magnitude: str = "output") -> LibraryEntry:
    return LibraryEntry(name, ((op,),), "elementwise", magnitude, tags=("unary",))


def _binary(name: str, *ops: str) -> LibraryEntry:
    return LibraryEntry(name, tuple((op,) for op in ops), "elementwise", "output", tags=("binary",))


ROW = "reduces the dim(s) named by the call; other dims are batch dims"
MATMUL = "contracts K: (.., M, K) x (K, N) -> (.., M, N); batch dims broadcast"

LIBRARY: tuple[LibraryEntry, ...] = (
    # -- elementwise unary: correctly rounded or nearly so, relative to |ref| --------------
    _unary("relu", "aten::relu"),
    _unary("exp", "aten::exp"),
    _unary("neg", "aten::neg"),
    _unary("abs", "aten::abs"),
    _unary("sqrt", "aten::sqrt"),
    _unary("log", "aten::log"),
    # Honest implementations of these lose accuracy in absolute terms near zero or in the
    # tails (gelu as 0.5*x*(1+erf), tanh as (e^2x-1)/(e^2x+1), x*sigmoid(x)), PyTorch's
    # own CUDA gelu included: the bound is relative to |ref| + |x|.
    _unary("gelu", "aten::gelu", "input-abs"),
    _unary("sigmoid", "aten::sigmoid", "input-abs"),
    _unary("tanh", "aten::tanh", "input-abs"),
    _unary("silu", "aten::silu", "input-abs"),
    # -- elementwise binary: one IEEE rounding, relative to |ref| -------------------------
    _binary("add", "aten::add"),
    _binary("sub", "aten::sub"),
    _binary("mul", "aten::mul"),
    _binary("div", "aten::div"),
    _binary("maximum", "aten::maximum"),
    _binary("minimum", "aten::minimum"),
    # -- reductions -----------------------------------------------------------------------
    LibraryEntry(
        "sum",
        (("aten::sum",),),
        "order",
        "abs-linear",
        "aten::sum",
        layouts=REDUCTION_LAYOUTS,
        dims=ROW,
        tags=("reduction",),
    ),
    LibraryEntry(
        "mean",
        (("aten::mean",),),
        "order",
        "abs-linear",
        "aten::mean",
        layouts=REDUCTION_LAYOUTS,
        dims=ROW,
        tags=("reduction",),
    ),
    # max is exact in any order: the elementwise model (output rounding only) applies.
    LibraryEntry(
        "max",
        (("aten::max",), ("aten::amax",)),
        "elementwise",
        "output",
        layouts=REDUCTION_LAYOUTS,
        dims=ROW,
        tags=("reduction", "exact-order"),
    ),
    # -- normalizations -------------------------------------------------------------------
    LibraryEntry(
        "softmax",
        (("aten::_softmax",),),
        "order",
        "softmax-arguments",
        "aten::_softmax",
        layouts=REDUCTION_LAYOUTS,
        dims=ROW,
        tags=("reduction",),
    ),
    LibraryEntry(
        "log_softmax",
        (("aten::_log_softmax",),),
        "order",
        "log-normalizer",
        "aten::_log_softmax",
        layouts=REDUCTION_LAYOUTS,
        dims=ROW,
        tags=("reduction",),
    ),
    LibraryEntry(
        "layer_norm",
        (("aten::native_layer_norm",),),
        "order",
        "layer-norm",
        "aten::native_layer_norm",
        layouts=REDUCTION_LAYOUTS,
        dims="normalizes over the trailing normalized_shape dims; leading dims are batch",
        tags=("reduction",),
    ),
    LibraryEntry(
        "rms_norm",
        (
            ("aten::pow", "aten::mean", "aten::add", "aten::sqrt", "aten::div"),
            ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"),
            ("aten::pow", "aten::mean", "aten::add_", "aten::rsqrt", "aten::mul"),
            ("aten::pow", "aten::mean", "aten::add_", "aten::rsqrt", "aten::mul", "aten::mul"),
            ("aten::_fused_rms_norm",),
        ),
        "order",
        "output",
        "aten::mean",
        layouts=REDUCTION_LAYOUTS,
        dims="normalizes by the root mean square over the reduced dim(s)",
        tags=("reduction",),
    ),
    # -- contractions ---------------------------------------------------------------------
    LibraryEntry(
        "matmul",
        (("aten::mm",), ("aten::bmm",)),
        "order",
        "abs-linear",
        "aten::mm",
        layouts=REDUCTION_LAYOUTS,
        dims=MATMUL,
        tags=("reduction", "contraction"),
    ),
    LibraryEntry(
        "linear",
        (("aten::addmm",),),
        "order",
        "abs-linear",
        "aten::addmm",
        layouts=REDUCTION_LAYOUTS,
        dims="x @ W^T + b: contracts in_features",
        tags=("reduction", "contraction"),
    ),
    LibraryEntry(
        "conv",
        (("aten::convolution",),),
        "order",
        "abs-linear",
        "aten::convolution",
        layouts=(Layout.CONTIGUOUS, Layout.OFFSET),
        dims="NCHW convolution: contracts in_channels/groups x kernel window",
        tf32_default=True,
        tags=("reduction", "contraction"),
    ),
)

BY_NAME: dict[str, LibraryEntry] = {entry.name: entry for entry in LIBRARY}

# Ops that reduce or contract along some axis: a reference calling any of them has a
# reduction structure (ORD-01 and PRC-02 run), library entry or not.
REDUCING_OPS: frozenset[str] = frozenset(
    {
        "aten::sum",
        "aten::mean",
        "aten::mm",
        "aten::bmm",
        "aten::addmm",
        "aten::baddbmm",
        "aten::convolution",
        "aten::_softmax",
        "aten::_log_softmax",
        "aten::logsumexp",
        "aten::native_layer_norm",
        "aten::native_group_norm",
        "aten::native_batch_norm",
        "aten::_native_batch_norm_legit_no_training",
        "aten::var",
        "aten::std",
        "aten::var_mean",
        "aten::std_mean",
        "aten::cumsum",
        "aten::prod",
        "aten::norm",
        "aten::linalg_vector_norm",
        "aten::_fused_rms_norm",
        "aten::dot",
        "aten::mv",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_attention_math",
        "aten::einsum",
    }
)


def entry(name: str) -> LibraryEntry:
    """The library entry called ``name`` (KeyError names the known ones)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no library entry {name!r}; known: {', '.join(BY_NAME)}") from None
