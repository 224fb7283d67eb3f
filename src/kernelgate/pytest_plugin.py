"""pytest plugin: judge reference/candidate pairs as tests (``pytest --kernelgate``).

Two ways to declare a pair:

- a ``kernelgate.toml`` file, collected under ``--kernelgate``: one test item per ``[[pair]]``
  (paths relative to the file; top-level keys are defaults for every pair)::

      reference = "reference.py"
      only = ["CMP-01", "EXC-01"]        # optional: gates to run (RES-01 always runs)

      [[pair]]
      candidate = "honest.py"            # expect defaults to "verified"

      [[pair]]
      candidate = "nan_swallow.py"
      expect = "rejected"                # a red-team kernel: the test passes if rejected

  Other keys: ``name``, ``seed``, ``contract`` (a contract file), ``timeout``, ``forbid``.

- a marked test taking the ``kernelgate_verify`` fixture, which is the pair's ``Verdict``::

      @pytest.mark.kernelgate(reference="ref.py", candidate="cand.py", only=["EXC-01"])
      def test_my_kernel(kernelgate_verify):
          assert kernelgate_verify.verdict == "verified"

A failure prints each failed gate's reason, counterexample and replay command
(``kernelgate.ci.failure_text``); the verdict, failed gates and replay commands also go
into the test's ``user_properties``, which ``--junitxml`` writes as JUnit properties.
``--kernelgate-device`` picks the device (cpu: the Triton interpreter), ``--kernelgate-json
DIR`` keeps each verdict's evidence. Registered as the ``kernelgate`` pytest11 entry point;
without the installed entry point, load it with ``-p kernelgate.pytest_plugin``.

kernelgate itself (and torch with it) is imported only when a pair is judged: an entry point
loads this module into every pytest run of the environment, most of which judge nothing.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kernelgate.verdict import Verdict

CONFIG_NAME = "kernelgate.toml"
MARK = "kernelgate"
OUTCOMES = ("verified", "narrowed", "rejected")
VERIFY_KEYS = {"reference", "candidate", "only", "seed", "contract", "timeout", "forbid"}
PAIR_KEYS = VERIFY_KEYS | {"name", "expect"}
VERDICT_KEY = pytest.StashKey[dict[str, Any]]()  # the evidence of the item's verdict


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kernelgate", "kernelgate: judge GPU kernels against a contract")
    group.addoption(
        "--kernelgate",
        action="store_true",
        help=f"collect the reference/candidate pairs of every {CONFIG_NAME} as tests",
    )
    group.addoption(
        "--kernelgate-device",
        default="cpu",
        help="device the candidates run on: cpu (Triton interpreter) or cuda",
    )
    group.addoption(
        "--kernelgate-json",
        type=Path,
        default=None,
        metavar="DIR",
        help="write each verdict's evidence JSON into DIR",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}(reference, candidate, **options): the pair the kernelgate_verify fixture "
        "judges (options: only, seed, contract, timeout, forbid)",
    )


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    if file_path.name == CONFIG_NAME and parent.config.getoption("--kernelgate"):
        return KernelgateFile.from_parent(parent, path=file_path)
    return None


class KernelgateUsageError(Exception):
    """A ``kernelgate.toml`` or mark that cannot be read as pairs."""


class KernelgateMismatch(Exception):
    """A pair whose verdict is not the one expected (its evidence rides along)."""

    def __init__(self, expected: str, evidence: dict[str, Any]) -> None:
        super().__init__(f"expected {expected}, got {evidence['verdict']}")
        self.expected = expected
        self.evidence = evidence


class KernelgateFile(pytest.File):
    """A ``kernelgate.toml``: one ``KernelgateItem`` per ``[[pair]]``."""

    def collect(self) -> Iterator[KernelgateItem]:
        try:
            data = tomllib.loads(self.path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise self.CollectError(f"{self.path}: {exc}") from None
        pairs = data.pop("pair", [])
        defaults = {k: v for k, v in data.items() if k in PAIR_KEYS}
        unknown = set(data) - PAIR_KEYS
        if unknown or not pairs:
            raise self.CollectError(
                f"{self.path}: "
                + (f"unknown keys {sorted(unknown)}" if unknown else "no [[pair]] tables")
            )
        seen: dict[str, int] = {}
        for pair in pairs:
            options = {**defaults, **pair}
            extra = set(options) - PAIR_KEYS
            if extra or "reference" not in options or "candidate" not in options:
                raise self.CollectError(
                    f"{self.path}: each [[pair]] needs reference and candidate"
                    + (f"; unknown keys {sorted(extra)}" if extra else "")
                )
            name = options.pop("name", None) or Path(options["candidate"]).stem
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name = f"{name}-{seen[name]}"
            yield KernelgateItem.from_parent(self, name=name, options=options)


class KernelgateItem(pytest.Item):
    """One pair: passes when the verdict is the one expected (``verified`` by default)."""

    def __init__(self, *, options: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.options = options
        self.add_marker(MARK)

    def runtest(self) -> None:
        options = dict(self.options)
        expected = options.pop("expect", "verified")
        if expected not in OUTCOMES:
            raise KernelgateUsageError(f"expect = {expected!r}; use one of {', '.join(OUTCOMES)}")
        _, evidence = judge(self.config, self.path.parent, options, self.name)
        self.stash[VERDICT_KEY] = evidence
        record_properties(self.user_properties, evidence)
        if evidence["verdict"] != expected:
            raise KernelgateMismatch(expected, evidence)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, KernelgateMismatch):
            mismatch = excinfo.value
            return f"{mismatch}\n" + failure_text(mismatch.evidence)
        if isinstance(excinfo.value, KernelgateUsageError):
            return f"{self.path}: {excinfo.value}"
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"kernelgate: {self.name}"


def judge(
    config: pytest.Config, base: Path, options: dict[str, Any], label: str
) -> tuple[Any, dict[str, Any]]:
    """Verify one pair (paths relative to ``base``): its ``Verdict`` and its evidence."""
    from kernelgate.errors import KernelgateError
    from kernelgate.pipeline import verify

    def resolve(value: str) -> Path:
        return (base / value).resolve() if not Path(value).is_absolute() else Path(value)

    unknown = set(options) - VERIFY_KEYS
    if unknown:
        raise KernelgateUsageError(f"unknown options {sorted(unknown)}")
    arguments: dict[str, Any] = {
        "device": config.getoption("--kernelgate-device"),
        "only": options.get("only"),
        "seed": int(options.get("seed", 0)),
        "forbid": tuple(options.get("forbid", ())),
    }
    if "timeout" in options:
        arguments["timeout"] = float(options["timeout"])
    if "contract" in options:
        arguments["contract"] = resolve(options["contract"])
    try:
        verdict = verify(resolve(options["reference"]), resolve(options["candidate"]), **arguments)
    except KernelgateError as exc:
        raise KernelgateUsageError(str(exc)) from None
    evidence = json.loads(verdict.to_json())
    folder = config.getoption("--kernelgate-json")
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
        (folder / f"{safe}.json").write_text(verdict.to_json())
    return verdict, evidence


def failure_text(evidence: dict[str, Any]) -> str:
    from kernelgate.ci import failure_text as told

    return told(evidence)


def record_properties(properties: list[tuple[str, object]], evidence: dict[str, Any]) -> None:
    """The verdict for JUnit (``--junitxml`` writes user_properties as <property>)."""
    properties.append(("kernelgate_verdict", evidence["verdict"]))
    failed = evidence.get("failed_gates", []) + evidence.get("failed_rules", [])
    if failed:
        properties.append(("kernelgate_failed", ", ".join(failed)))
    for gate in evidence.get("gates", []):
        if gate["status"] == "fail" and gate.get("counterexample"):
            properties.append((f"kernelgate_replay_{gate['id']}", gate["counterexample"]["replay"]))


@pytest.fixture
def kernelgate_verify(request: pytest.FixtureRequest) -> Verdict:
    """The ``Verdict`` of the pair named by the test's ``@pytest.mark.kernelgate(...)``.

    Paths are relative to the test file. If the test then fails, its report carries the
    verdict's failures with counterexamples and replay commands (a "kernelgate" section).
    """
    marker = request.node.get_closest_marker(MARK)
    if marker is None:
        raise KernelgateUsageError(
            "kernelgate_verify needs the pair: mark the test "
            "@pytest.mark.kernelgate(reference=..., candidate=...)"
        )
    options = dict(marker.kwargs)
    for key, value in zip(("reference", "candidate"), marker.args):
        options[key] = value
    if "reference" not in options or "candidate" not in options:
        raise KernelgateUsageError("@pytest.mark.kernelgate needs reference and candidate")
    verdict, evidence = judge(request.config, request.path.parent, options, request.node.name)
    request.node.stash[VERDICT_KEY] = evidence
    record_properties(request.node.user_properties, evidence)
    return verdict


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed marked test gets its verdict's failures as a report section."""
    outcome = yield
    report = outcome.get_result()
    evidence = item.stash.get(VERDICT_KEY, None)
    if (
        evidence is not None
        and report.when == "call"
        and report.failed
        and not isinstance(item, KernelgateItem)  # whose repr_failure already tells it
    ):
        report.sections.append(("kernelgate", failure_text(evidence)))
