"""The fleet dashboard is what hack/dashboard.py builds, its queries name only metrics the
operator exports (a typo would draw an empty panel, silently), and docs/operations.md shows
each query as the dashboard runs it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dashboard  # hack/dashboard.py (hack/ is on the path: tests/conftest.py)
from tessera import metrics

REPO = Path(__file__).resolve().parents[2]
# A metric name in PromQL: followed by a selector, a range or a closing parenthesis.
NAME = re.compile(r"\b(tessera_[a-z_]+)\b")


def exported() -> set[str]:
    """Every series name the registry exposes (a histogram's _bucket, _sum and _count)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    names: set[str] = set()
    for family in metrics.REGISTRY.collect():  # a labelled family may have no sample yet
        names.add(family.name)
        names |= {family.name + s for s in suffixes.get(family.type, ())}
    return names


def test_the_committed_dashboard_is_the_generated_one() -> None:
    assert dashboard.OUT.read_text() == dashboard.text(), "run `make chart`"
    board = json.loads(dashboard.OUT.read_text())
    assert board["uid"] == "tessera-fleet"
    assert [p["title"] for p in board["panels"]] == [p.title for p in dashboard.PANELS]
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource"}


def test_every_query_names_only_metrics_the_operator_exports() -> None:
    known = exported()
    for panel in dashboard.PANELS:
        for query in panel.queries:
            used = set(NAME.findall(query.expr))
            assert used, f"{panel.title}: no Tessera metric in {query.expr}"
            assert used <= known, f"{panel.title}: unknown {sorted(used - known)}"
    # The alerts too: a renamed metric must not leave a rule that can never fire.
    rules = (REPO / "charts/tessera/templates/prometheusrule.yaml").read_text()
    assert set(NAME.findall(rules)) <= known


def test_the_operations_guide_shows_every_panels_query() -> None:
    guide = (REPO / "docs/operations.md").read_text().replace("\\|", "|")
    for panel in dashboard.PANELS:
        assert f"| {panel.title} |" in guide, panel.title
        for query in panel.queries:
            assert f"`{query.expr}`" in guide, query.expr
