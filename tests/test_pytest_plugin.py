"""The pytest plugin (issue 23, part 5): pairs judged as tests, failures told with their
counterexample and replay command, verdicts in JUnit properties.

Run through pytester in a subprocess of its own, with the plugin loaded by ``-p`` (the
shared environment's editable install may predate the pytest11 entry point) and every
other plugin left out.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import pytest

from .conftest import ROOT, SOFTMAX

pytest_plugins = ("pytester",)

REFERENCE = SOFTMAX / "reference.py"
HONEST = SOFTMAX / "honest.py"
NAN_SWALLOW = SOFTMAX / "nan_swallow.py"
PLUGIN = ("-p", "kernelgate.pytest_plugin", "-p", "no:cacheprovider")


@pytest.fixture
def plugin_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project with a kernelgate.toml of three softmax pairs and one marked test."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makefile(
        ".toml",
        kernelgate=f"""
reference = "{REFERENCE}"
only = ["EXC-01"]

[[pair]]
candidate = "{HONEST}"

[[pair]]
name = "nan_swallow_is_caught"
candidate = "{NAN_SWALLOW}"
expect = "rejected"

[[pair]]
candidate = "{NAN_SWALLOW}"
""",
    )
    pytester.makepyfile(
        test_marked=f"""
import pytest

@pytest.mark.kernelgate(reference=r"{REFERENCE}", candidate=r"{NAN_SWALLOW}", only=["EXC-01"])
def test_nan_swallow_kernel(kernelgate_verify):
    assert kernelgate_verify.verdict == "verified"
"""
    )
    return pytester


def test_pairs_pass_and_fail_with_their_counterexample_and_replay(
    plugin_project: pytest.Pytester,
) -> None:
    result = plugin_project.runpytest_subprocess(*PLUGIN, "--kernelgate", "--junitxml=junit.xml")
    result.assert_outcomes(passed=2, failed=2)
    output = result.stdout.str()
    assert "expected verified, got rejected" in output  # the toml pair
    assert "EXC-01 (non-finite propagation)" in output
    assert "counterexample: case inject=" in output and '"actual_class": "FINITE"' in output
    replay = f"replay: kernelgate verify {REFERENCE} {NAN_SWALLOW} --device cpu --only EXC-01"
    assert output.count(replay) >= 2  # the toml pair and the marked test's section
    assert "kernelgate verdict: rejected (failed: EXC-01)" in output
    suite = ElementTree.parse(plugin_project.path / "junit.xml").getroot()
    properties = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in suite.iter("testcase")
    }
    assert properties["honest"]["kernelgate_verdict"] == "verified"
    assert properties["nan_swallow_is_caught"]["kernelgate_failed"] == "EXC-01"
    assert properties["test_nan_swallow_kernel"]["kernelgate_replay_EXC-01"].startswith(
        "kernelgate verify"
    )


def test_toml_pairs_are_collected_only_under_the_option(plugin_project: pytest.Pytester) -> None:
    plain = plugin_project.runpytest_subprocess(*PLUGIN, "--collect-only", "-q")
    assert "kernelgate.toml" not in plain.stdout.str()
    assert "test_nan_swallow_kernel" in plain.stdout.str()
    collected = plugin_project.runpytest_subprocess(*PLUGIN, "--kernelgate", "--collect-only", "-q")
    collected.stdout.fnmatch_lines(
        [
            "*kernelgate.toml::honest",
            "*kernelgate.toml::nan_swallow_is_caught",
            "*kernelgate.toml::nan_swallow",
        ]
    )
