"""``guarded``: a module that calls a verified kernel only where its verdict covers the call.

A verdict says on which inputs a candidate was shown right: the whole contract (verified),
a stated part of it (narrowed, ``verified_domain.contract``), or nowhere (rejected). A
caller who deploys the candidate behind ``guarded(reference, candidate, evidence)`` gets
the candidate's output for inputs inside that domain and the reference's everywhere else,
and ``routes`` counts how often each side answered.

The evidence is tied to the programs it judged: a verdict records the SHA-256 of both
files' text (``reference_sha256``, ``candidate_sha256``; older verdicts the contract's
``provenance.reference_sha256``), and a guard handed other programs refuses to start
(``DispatchError``) instead of trusting a verdict about someone else's code. A rejected
verdict gives a guard that always calls the reference, with a ``DispatchWarning``.

Unlike the judge, the guard runs the candidate in the caller's own process: deploying a
kernel is the caller's decision, and the verdict is what that decision rests on.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from kernelgate.contract.spec import CONTRACT_SCHEMA, READABLE_SCHEMAS, Contract
from kernelgate.dispatch.domain_check import CompiledDomain
from kernelgate.errors import CandidateLoadError, KernelgateError
from kernelgate.formats.kernelbench import (
    KERNELBENCH_SEED,
    check_candidate_source,
    load_reference,
    set_seed,
)

READABLE_VERDICTS = ("kernelgate.verdict/1", "kernelgate.verdict/2")
DIGEST_SHOWN = 12  # hex digits of a SHA-256 in messages
CANDIDATE, REFERENCE = "candidate", "reference"


class DispatchError(KernelgateError):
    """The evidence cannot back this guard (other programs, unreadable, unknown schema)."""


class DispatchWarning(UserWarning):
    """The guard works, but rests on less than a full verdict for these programs."""


class GuardedModule(torch.nn.Module):
    """Calls ``candidate`` for inputs inside ``domain``, ``reference`` otherwise.

    ``domain`` is None for a rejected verdict: every call goes to the reference.
    ``routes``: calls answered by each side. ``why(*args)``: None when a call would go to
    the candidate, else the reason it would not. The domain's device is fixed when the
    guard is built: inputs on another device (after ``.to()``, say) go to the reference.
    """

    def __init__(
        self,
        reference: torch.nn.Module,
        candidate: torch.nn.Module,
        domain: CompiledDomain | None,
        outcome: str,
    ) -> None:
        super().__init__()
        self.reference = reference
        self.candidate = candidate
        self.domain = domain
        self.outcome = outcome
        self.routes: dict[str, int] = {CANDIDATE: 0, REFERENCE: 0}
        self._admits = None if domain is None else domain.admits

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        # ``self._modules[...]``, not ``self.candidate``: a submodule read through
        # ``nn.Module.__getattr__`` costs a Python call on every dispatch
        admits = self._admits
        if admits is not None and admits(args, kwargs):
            self.routes[CANDIDATE] += 1
            return self._modules[CANDIDATE](*args, **kwargs)
        self.routes[REFERENCE] += 1
        return self._modules[REFERENCE](*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``forward``, without ``nn.Module``'s call machinery unless hooks are registered
        on the guard itself: that machinery costs as much as the check it would wrap. Hooks
        on the reference and the candidate run as usual (they are called as modules);
        torch's global module hooks are not run for the guard itself."""
        if self._forward_pre_hooks or self._forward_hooks:
            return super().__call__(*args, **kwargs)
        admits = self._admits  # forward's body, inlined: one Python call less per dispatch
        if admits is not None and admits(args, kwargs):
            self.routes[CANDIDATE] += 1
            return self._modules[CANDIDATE](*args, **kwargs)
        self.routes[REFERENCE] += 1
        return self._modules[REFERENCE](*args, **kwargs)

    def why(self, *args: Any, **kwargs: Any) -> str | None:
        """Why a call with these inputs would go to the reference (None: to the candidate)."""
        if self.domain is None:
            return f"the evidence's verdict is {self.outcome}: the reference answers every call"
        return self.domain.reason(args, kwargs)

    def extra_repr(self) -> str:
        return f"verdict={self.outcome}, routes={self.routes}"


class NotLoaded(torch.nn.Module):
    """Stands in for a rejected candidate given as a file: the guard never calls it."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.path} was rejected and never loaded; the reference answers")

    def extra_repr(self) -> str:
        return f"rejected, not loaded: {self.path}"


def guarded(
    reference: torch.nn.Module | str | Path,
    candidate: torch.nn.Module | str | Path,
    evidence: dict[str, Any] | str | Path,
    device: torch.device | str = "cpu",
    *,
    trust_values: bool = False,
) -> GuardedModule:
    """A ``torch.nn.Module`` that calls ``candidate`` only inside its verified domain.

    ``reference`` / ``candidate``: KernelBench files (``Model`` and ``ModelNew``, built with
    the reference's ``get_init_inputs()`` under KernelBench's seed, so they hold the same
    weights the judge saw) or modules already built. A module's digest is read from the file
    that defines its class; where there is none, a ``DispatchWarning`` says the evidence
    could not be matched to it. ``evidence``: a verdict's JSON (``kernelgate verify --json``)
    as a path or a dict. ``device``: where both modules are moved and the candidate runs;
    inputs elsewhere go to the reference. ``trust_values``: skip the contract's value checks
    (finite only, value ranges, integer bounds), which cost a synchronisation per call, when
    the caller knows its values are in range.

    Raises ``DispatchError`` when the evidence was made for another reference or candidate,
    or cannot be read; warns (``DispatchWarning``) for a rejected verdict (every call then
    goes to the reference, and a candidate given as a file is never imported), a partial
    verification (``--only``), a verdict made on another kind of device, and value
    conditions no per-call check can establish.
    """
    data, where = read_evidence(evidence)
    device = torch.device(device)
    reference_module, reference_file, init_inputs = _reference(reference)
    check_digest(data, where, "reference", reference_file)  # before the candidate is built
    outcome = data.get("verdict")
    if outcome == "rejected" and not isinstance(candidate, torch.nn.Module):
        # never imported: a rejected candidate's code does not run in the caller's process
        check_digest(data, where, "candidate", Path(candidate))
        candidate_module: torch.nn.Module = NotLoaded(Path(candidate))
    else:
        candidate_module, candidate_file = _candidate(candidate, init_inputs)
        check_digest(data, where, "candidate", candidate_file)
    domain = None
    if outcome == "rejected":
        failed = ", ".join(data.get("failed_gates", []) + data.get("failed_rules", []))
        warnings.warn(
            f"the evidence {where} rejects the candidate (failed: {failed or 'unknown'}): "
            "every call goes to the reference",
            DispatchWarning,
            stacklevel=2,
        )
    elif outcome in ("verified", "narrowed"):
        contract = domain_contract(data, where)
        domain = CompiledDomain(contract, device, trust_values=trust_values)
        _warn_rests_on_less(data, where, device, domain)
    else:
        raise DispatchError(
            f"the evidence {where} has verdict {outcome!r}; expected one of "
            "verified, narrowed, rejected"
        )
    return GuardedModule(reference_module.to(device), candidate_module.to(device), domain, outcome)


def read_evidence(evidence: dict[str, Any] | str | Path) -> tuple[dict[str, Any], str]:
    """The verdict's JSON as a dict, and how to name it in messages."""
    if isinstance(evidence, dict):
        data, where = evidence, "(given as a dict)"
    else:
        path = Path(evidence)
        where = str(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise DispatchError(f"cannot read the evidence {path}: {exc}") from None
    schema = data.get("schema")
    if schema not in READABLE_VERDICTS:
        raise DispatchError(
            f"the evidence {where} has schema {schema!r}; this kernelgate reads "
            f"{', '.join(READABLE_VERDICTS)} (write it with `kernelgate verify --json`)"
        )
    return data, where


def domain_contract(data: dict[str, Any], where: str) -> Contract:
    """The contract the candidate was shown right on: the narrowed one where narrowed."""
    if data["verdict"] == "narrowed":
        contract = (data.get("verified_domain") or {}).get("contract")
    else:
        contract = data.get("contract")
    if not isinstance(contract, dict) or contract.get("schema") not in READABLE_SCHEMAS:
        raise DispatchError(f"the evidence {where} holds no readable contract for its domain")
    try:
        return Contract.from_dict({**contract, "schema": CONTRACT_SCHEMA})
    except (TypeError, ValueError, KeyError) as exc:
        raise DispatchError(f"the evidence {where} holds a malformed contract: {exc}") from None


def file_sha256(path: Path | None) -> str | None:
    """SHA-256 of a program's text, as the judge digests it (``ReferenceProgram.sha256``)."""
    if path is None:
        return None
    try:
        return hashlib.sha256(path.read_text().encode()).hexdigest()
    except (OSError, UnicodeDecodeError):
        return None


def check_digest(data: dict[str, Any], where: str, role: str, program: Path | None) -> None:
    """Refuse evidence made for another program; warn where the match cannot be checked."""
    recorded = data.get(f"{role}_sha256")
    if recorded is None and role == "reference":  # verdicts before the top-level digests
        recorded = ((data.get("contract") or {}).get("provenance") or {}).get("reference_sha256")
    actual = file_sha256(program)
    if recorded is None or actual is None:
        missing = (
            "the evidence records no digest of it"
            if recorded is None
            else ("its source file cannot be found")
        )
        warnings.warn(
            f"cannot check that the evidence {where} was made for this {role} ({missing}); "
            "the guard trusts that it was",
            DispatchWarning,
            stacklevel=3,
        )
        return
    if recorded != actual:
        judged = data.get(role, "?")
        raise DispatchError(
            f"the evidence {where} was made for a {role} with sha256 "
            f"{recorded[:DIGEST_SHOWN]}... ({judged}), but the {role} given ({program}) has "
            f"sha256 {actual[:DIGEST_SHOWN]}...: its verdict says nothing about this one. "
            f"Verify the pair again (`kernelgate verify REFERENCE CANDIDATE --json EVIDENCE`) "
            f"and pass that evidence, or pass the {role} this evidence was made for."
        )


def _warn_rests_on_less(
    data: dict[str, Any], where: str, device: torch.device, domain: CompiledDomain
) -> None:
    partial = [s for s in data.get("skipped", []) if "not selected" in s]
    if partial:
        gates = ", ".join(s.split(":")[0] for s in partial)
        warnings.warn(
            f"the evidence {where} is a partial verification: {gates} did not run (--only); "
            "the guard trusts the domain the gates that ran established",
            DispatchWarning,
            stacklevel=3,
        )
    judged_on = str((data.get("environment") or {}).get("device", ""))
    if judged_on and torch.device(judged_on).type != device.type:
        warnings.warn(
            f"the evidence {where} was made on {judged_on}, the candidate runs on {device}: "
            "verify it on this kind of device before relying on the guard",
            DispatchWarning,
            stacklevel=3,
        )
    if domain.unchecked:
        warnings.warn(
            "the guard cannot check these value conditions per call, and trusts them: "
            + "; ".join(domain.unchecked),
            DispatchWarning,
            stacklevel=3,
        )


def source_file(module: torch.nn.Module) -> Path | None:
    """The file that defines ``module``'s class, when Python can say."""
    try:
        found = inspect.getsourcefile(type(module))
    except (TypeError, OSError):
        return None
    return Path(found) if found else None


def _reference(
    reference: torch.nn.Module | str | Path,
) -> tuple[torch.nn.Module, Path | None, list[Any] | None]:
    """The reference module, its file, and its init inputs (None for a module given)."""
    if isinstance(reference, torch.nn.Module):
        return reference, source_file(reference), None
    program = load_reference(reference)
    init_inputs = program.init_inputs()
    return program.build_model(init_inputs), program.path, init_inputs


def _candidate(
    candidate: torch.nn.Module | str | Path, init_inputs: list[Any] | None
) -> tuple[torch.nn.Module, Path | None]:
    """The candidate module built as the judge's worker builds it, and its file."""
    if isinstance(candidate, torch.nn.Module):
        return candidate, source_file(candidate)
    if init_inputs is None:
        raise DispatchError(
            f"the candidate {candidate} is a file but the reference a module: pass both as "
            "files, or the candidate as a module built with the reference's init inputs"
        )
    path = Path(candidate)
    check_candidate_source(path)
    name = f"kernelgate_dispatch_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # inspect and pickling find the classes through it
    try:
        spec.loader.exec_module(module)
        set_seed(KERNELBENCH_SEED)
        built = module.ModelNew(*init_inputs)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CandidateLoadError(
            f"candidate {path} failed to load for dispatch: {type(exc).__name__}: {exc}"
        ) from None
    return built, path
