"""Zero-padding of odd head widths to 16-byte-aligned rows, shared by the kernel families.

Triton specializes a kernel on what it can prove about its addresses: rows of an odd width
(31 elements, or 1) give scalar loads and more registers, and on sm_90 some of our fp32
kernels then spill (RES-02's offline compile, Triton 3.9: the SSD output kernel 20-24 bytes
at N = 31 and N = 1, the Gated DeltaNet WY kernel 12-20 bytes at K = 31 and K = 1; none at
aligned widths). For the linear recurrences here, zeros appended to a head dimension are
exact: the padded state rows or columns stay zero and reach no output, and are cut off."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def aligned_width(dim: int, *dtypes: torch.dtype) -> int:
    """``dim`` rounded up so that rows of that many elements start 16-byte aligned in every
    one of ``dtypes`` and in fp32 (the state and scratch buffers)."""
    align = max(4, *(16 // torch.empty((), dtype=d).element_size() for d in dtypes))
    return -(-dim // align) * align


def zero_pad(t: torch.Tensor, last: int, second_last: int | None = None) -> torch.Tensor:
    """``t`` with zeros appended to its last (and second-last) dimension up to those sizes;
    ``t`` itself when nothing is to be added."""
    extra_last = last - t.shape[-1]
    extra_second = 0 if second_last is None else second_last - t.shape[-2]
    if extra_last == 0 and extra_second == 0:
        return t
    return F.pad(t, (0, extra_last, 0, extra_second))


@dataclass(frozen=True)
class StatePadding:
    """The padding of a [rows, columns] recurrence state (delta_rule's [K, V], Mamba-2's
    [N, P]) to aligned widths around the kernels, and its removal from what they return.

    The output's last dimension is the state's columns (V, P); the inputs that reach the
    rows (k, q; B, C) and the columns (v; x) are padded by the member itself. Each step is a
    copy only where a width changes: with aligned widths the tensors pass through as they
    are, so the padding costs nothing there."""

    rows: int
    cols: int
    rows_wide: int
    cols_wide: int

    @classmethod
    def of(
        cls,
        rows: int,
        cols: int,
        row_dtypes: tuple[torch.dtype, ...],
        col_dtypes: tuple[torch.dtype, ...],
    ) -> StatePadding:
        """The widths for rows read in ``row_dtypes`` and columns in ``col_dtypes``."""
        return cls(rows, cols, aligned_width(rows, *row_dtypes), aligned_width(cols, *col_dtypes))

    def pad_state(self, state: torch.Tensor | None) -> torch.Tensor | None:
        """A [B, H, rows, cols] state (or None) padded to [B, H, rows_wide, cols_wide]."""
        return zero_pad(state, self.cols_wide, self.rows_wide) if state is not None else None

    def cut_forward(
        self, out: torch.Tensor, final_state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The forward's output and final state with the padded columns and rows cut off
        (contiguous copies where anything was cut)."""
        if self.cols_wide != self.cols:
            out = out[..., : self.cols].contiguous()
        if final_state is not None and (self.rows_wide, self.cols_wide) != (self.rows, self.cols):
            final_state = final_state[:, :, : self.rows, : self.cols].contiguous()
        return out, final_state

    def pad_cotangents(
        self, d_out: torch.Tensor, d_final: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The backward's incoming gradients padded back to the kernels' widths (zeros: the
        padded outputs were cut off, so nothing flows into them)."""
        return zero_pad(d_out, self.cols_wide), self.pad_state(d_final)

    def cut_state(self, state: torch.Tensor | None) -> torch.Tensor | None:
        """A [B, H, rows_wide, cols_wide] state gradient (dh0) as a view of the caller's
        [B, H, rows, cols]."""
        return state[:, :, : self.rows, : self.cols] if state is not None else None
