"""STATIC-DOWNCAST: arithmetic below the precision the contract promises.

Under a float32 contract, a kernel that computes in float16, bfloat16, float8 or TF32 may
pass a loose comparison at one shape and fail where magnitudes or lengths grow (PRC-01 and
PRC-02 measure it; this rule says where in the source). Caught: ``.half()``,
``.bfloat16()``, ``.to(<low dtype>)`` / ``dtype=<low dtype>`` with a torch or Triton
dtype of 16 bits or fewer, ``autocast`` (torch.autocast, torch.cuda.amp, torch.amp),
``allow_tf32 = True`` and ``set_float32_matmul_precision("high" | "medium")``. Silent
under a contract that is not float32 (a float16 contract may compute in float16).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext
from kernelgate.static.sources import SourceFile

LOW_DTYPES = frozenset(
    {"float16", "half", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz"}
    | {"float8_e5m2fnuz", "float8_e8m0fnu", "fp8e4nv", "fp8e5", "fp8e4b15", "fp8e4b8"}
)
LOW_METHODS = frozenset({"half", "bfloat16"})
AUTOCAST = frozenset(
    {"torch.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast", "torch.cpu.amp.autocast"}
)


def _low_dtype(source: SourceFile, node: ast.AST) -> str | None:
    name = source.qualified(node)
    if name and name.split(".")[0] in ("torch", "triton") and name.split(".")[-1] in LOW_DTYPES:
        return name
    return None


class DowncastRule(Rule):
    id = "STATIC-DOWNCAST"
    title = "float16 / bfloat16 / float8 / TF32 arithmetic under a float32 contract"

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        if not ctx.float32_contract:
            return
        for source in ctx.files:
            for node in source.nodes:
                message = self._downcast(source, node)
                if message:
                    yield self.hit(source, node, message)

    def _downcast(self, source: SourceFile, node: ast.AST) -> str | None:
        if isinstance(node, ast.Call):
            name = source.qualified(node.func)
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in LOW_METHODS and not node.args:
                return f"`.{func.attr}()` downcasts below float32"
            if name in AUTOCAST:
                return f"`{name}` runs ops in reduced precision"
            if name and name.endswith("set_float32_matmul_precision") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and arg.value in ("high", "medium"):
                    return f"float32 matmuls at precision {arg.value!r} (TF32 / bfloat16)"
            dtype_args = (
                list(node.args)
                if isinstance(func, ast.Attribute)
                and func.attr
                in (
                    "to",
                    "type",
                )
                else []
            )
            dtype_args += [k.value for k in node.keywords if k.arg == "dtype"]
            for arg in dtype_args:
                low = _low_dtype(source, arg)
                if low:
                    return f"casts to `{low}` under a float32 contract"
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == "allow_tf32"
                    and node.value.value is True
                ):
                    return "allow_tf32 = True: float32 matmuls / convolutions in TF32"
        return None
