"""STATIC-VENDORED: third-party sources bundled into the candidate.

A candidate that pastes a library's kernel (a FlashAttention, CUTLASS or FLA source) has
not written it: the judge would verify the library, and the license may not allow the
copy. Caught, line by line in every file: license headers (``Copyright``,
``SPDX-License-Identifier``, ``Licensed under the Apache License``, ``MIT License``,
``BSD ... License``, ``GNU General Public License``) and identifiers of well-known kernel
libraries (``flash_attn``, ``xformers``, ``cutlass``/``cute::``, ``fla.``/``fla.ops``,
``triton_kernels``, ``liger_kernel``, ``apex``, ``thunderkittens``) in code, strings or
comments. Importing such a library (not bundling it) is FORBID-01's business when a
problem forbids it; here it is a flag, since the name alone says where the code came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext

LICENSE = re.compile(
    r"Copyright\s+(\(c\)|©|\d{4})|SPDX-License-Identifier|Licensed under the Apache License"
    r"|MIT License|BSD[- ]\d-Clause|GNU (Lesser )?General Public License",
    re.IGNORECASE,
)
LIBRARIES = re.compile(
    r"\b(flash_attn\w*|flashattention|xformers|cutlass|cute::|triton_kernels|liger_kernel"
    r"|thunderkittens|apex\.(?:contrib|normalization|fused)\w*)"
    r"|(?:\bfrom|\bimport)\s+(fla)\b|\bfla\.(?:ops|modules|layers)\b",
    re.IGNORECASE,
)


class VendoredSourceRule(Rule):
    id = "STATIC-VENDORED"
    title = "license headers or well-known kernel-library identifiers bundled as source"

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        for source in ctx.files:
            reported: set[str] = set()
            for number, line in enumerate(source.text.splitlines(), start=1):
                for pattern, kind in ((LICENSE, "license header"), (LIBRARIES, "library")):
                    match = pattern.search(line)
                    if match is None:
                        continue
                    label = f"{kind} `{match.group(0).strip()}`"
                    if label.lower() in reported:
                        continue  # one finding per distinct text a file: where it starts
                    reported.add(label.lower())
                    yield Hit(source, number, f"{label}: third-party source or identifier")
