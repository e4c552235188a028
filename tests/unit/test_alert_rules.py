"""The chart's alert rules, rendered with the chart's defaults, pass `promtool check rules`,
and alert_rules.test.yaml shows each alert firing and resolving under `promtool test rules`
(the pinned Prometheus, built by `make tools`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import cluster  # hack/cluster.py (hack/ is on the path: tests/conftest.py)
import sync_chart

CASES = Path(__file__).with_name("alert_rules.test.yaml")
PROMTOOL = cluster.binaries()["promtool"]

pytestmark = pytest.mark.skipif(
    not PROMTOOL.exists(), reason=f"{PROMTOOL} missing: run `make tools` to build it"
)


def promtool(tmp: Path, *values: str) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` on the cases, against the rules rendered with values."""
    (tmp / "rules.yaml").write_text(yaml.safe_dump(sync_chart.rule_file(*values), sort_keys=False))
    shutil.copy(CASES, tmp / CASES.name)
    return subprocess.run(
        [str(PROMTOOL), "test", "rules", CASES.name],
        cwd=tmp, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_rendered_rules_pass_promtool_check(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(sync_chart.rule_file(), sort_keys=False))
    proc = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 4 rules found" in proc.stdout


def test_every_alert_fires_and_resolves_in_the_cases(tmp_path: Path) -> None:
    proc = promtool(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    alerts = {r["alert"] for g in sync_chart.rule_file()["groups"] for r in g["rules"]}
    fires, resolves = set(), set()
    for case in yaml.safe_load(CASES.read_text())["tests"]:
        fired: set[str] = set()
        for check in case["alert_rule_test"]:  # in time order, as written
            name = check["alertname"]
            if check["exp_alerts"]:
                fired.add(name)
                fires.add(name)
            elif name in fired:
                resolves.add(name)
    assert fires == alerts, f"no firing case for {sorted(alerts - fires)}"
    assert resolves == alerts, f"no resolving case for {sorted(alerts - resolves)}"


def test_the_cases_catch_a_changed_threshold(tmp_path: Path) -> None:
    """The cases pin behaviour: the same cases fail against a doubled waiting threshold."""
    proc = promtool(
        tmp_path, "--set", "metrics.prometheusRule.alerts.workloadsWaiting.thresholdSeconds=7200"
    )
    assert proc.returncode != 0
    assert "TesseraWorkloadsWaitingTooLong" in proc.stdout + proc.stderr
