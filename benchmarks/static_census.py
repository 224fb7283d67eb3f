"""Static-layer census of a CUDA-L1 corpus file: findings per rule over its non-empty candidates.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/static_census.py \
           /work/shared/corpora/cuda-l1/h100.jsonl [--forbid torch.topk ...]

Each record's ``custom_code`` is written to a temporary folder and read by the static layer
(never imported or run). Prints, per rule, the candidates with at least one finding and the
findings in all, plus the candidates that contain no kernel of their own (no ``load_inline``,
no ``@triton.jit``, no raw CUDA), the count issue 21 starts from.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections import Counter
from pathlib import Path

from kernelgate.static import RULE_IDS, StaticPolicy, analyse

AUTHORED = re.compile(r"load_inline|@triton\.jit|__global__|RawKernel|cpp_extension")


def census(corpus: Path, forbidden: tuple[str, ...]) -> dict[str, object]:
    records = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    candidates = [r for r in records if (r.get("custom_code") or "").strip()]
    with_finding: Counter[str] = Counter()
    findings: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as folder:
        for index, record in enumerate(candidates):
            path = Path(folder) / f"candidate_{index}.py"
            path.write_text(record["custom_code"])
            found = analyse(path, StaticPolicy(forbidden=forbidden))
            findings.update(f.rule for f in found)
            with_finding.update({f.rule for f in found})
            path.unlink()
    return {
        "corpus": corpus.name,
        "records": len(records),
        "non_empty": len(candidates),
        "no_kernel_of_their_own": sum(
            1 for r in candidates if not AUTHORED.search(r["custom_code"])
        ),
        "rules": {
            rule: {"candidates": with_finding[rule], "findings": findings[rule]}
            for rule in RULE_IDS
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--forbid", action="append", default=[])
    args = parser.parse_args()
    result = census(args.corpus, tuple(args.forbid))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
