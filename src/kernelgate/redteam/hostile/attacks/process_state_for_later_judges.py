"""Hostile (template): change process-wide torch and CUDA state, and leave state on disk
where a later judge would pick it up, then return zeros.

In the worker, at import: TF32 for matmuls and cuDNN, "medium" float32 matmul precision,
reduced-precision fp16 and bf16 reductions, flush-to-zero of denormals, cuDNN autotuning,
and on a device a 1% per-process memory fraction and a larger device malloc heap. On disk:
an entry in CUDA's JIT cache where CUDA looks by default (``~/.nv/ComputeCache``, used when
``CUDA_CACHE_PATH`` is unset) and one in torch's kernel cache (``~/.cache/torch/kernels``).
HOME is the arena's. The runner then judges an honest candidate in the same arena
(``later_judge.py``): it must be verified and see every setting at its default.
"""

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)


def _process_wide() -> str:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("medium")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    torch.backends.cudnn.benchmark = True
    flushed = torch.set_flush_denormal(True)
    changed = "tf32, medium precision, reduced-precision reductions, cudnn.benchmark"
    return changed + (", flush-denormal" if flushed else "")


def _device_wide() -> str:
    if ARENA.device == "cpu" or not torch.cuda.is_available():
        return "no device in this worker"
    torch.cuda.set_per_process_memory_fraction(0.01)
    import ctypes

    runtime = ctypes.CDLL("libcudart.so", use_errno=True)
    heap = ctypes.c_size_t(1 << 30)
    status = runtime.cudaDeviceSetLimit(ctypes.c_int(2), heap)  # cudaLimitMallocHeapSize
    return f"memory fraction 0.01; cudaDeviceSetLimit(malloc heap 1 GiB) -> {status}"


LINES = [
    kit.attempt(ARENA, "process-state", _process_wide),
    kit.attempt(ARENA, "device-state", _device_wide),
    kit.attempt(
        ARENA, "cuda-jit-cache", lambda: kit.plant(ARENA, ".nv/ComputeCache/index", "kgh\n")
    ),
    kit.attempt(
        ARENA, "torch-kernel-cache", lambda: kit.plant(ARENA, ".cache/torch/kernels/kgh", "kgh\n")
    ),
]


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        kit.fail_loudly(LINES)
        return torch.zeros_like(a)
