"""The benchmark table in README.md and bench/README.md is what hack/bench_table.py makes of
the committed bench/results/*.json: a result committed without `make bench-table` fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench_table  # hack/bench_table.py (hack/ is on the path: tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("doc", bench_table.DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_table_is_generated_from_the_committed_results(doc: Path) -> None:
    text = doc.read_text()
    assert bench_table.START in text and bench_table.END in text
    assert bench_table.rewrite(text, bench_table.table(bench_table.rows())) == text, (
        f"{doc.name}'s benchmark table differs from bench/results/: run `make bench-table`"
    )


def test_every_committed_result_has_rows() -> None:
    names = {row[0] for row in bench_table.rows()}
    fleet_runs = sorted(bench_table.RESULTS.glob("fleet-*.json"))
    assert len([n for n in names if n.startswith("fleet (")]) == len(fleet_runs)
    assert any(n.startswith("planning") for n in names)
    assert any(n.startswith("placement quality") for n in names)


def test_a_fleet_target_shows_its_unit_and_the_same_runs_baseline(tmp_path: Path) -> None:
    run = {
        "scale": "default",
        "parameters": {"clientPodsPerSecond": None},
        "tessera": {"singles": {"podsBoundPerSecond": 150.0}},
        "baseline": {"singles": {"podsBoundPerSecond": 200.0}},
        "ratioToFloor": {"singles": 0.9},
        "targets": [
            {
                "target": "bound pods/s vs bare scheduler, singles",
                "threshold": ">= 0.8x",
                "measured": 0.75,
                "met": False,
            },
            {"target": "operator RSS idle", "threshold": "<= 80 MB", "measured": 70.0, "met": True},
            {"target": "restart", "threshold": "<= 10 s", "measured": None, "met": None},
        ],
    }
    (tmp_path / "fleet-default.json").write_text(json.dumps(run))
    assert bench_table.rows(tmp_path) == [
        (
            "fleet (default)",
            "bound pods/s vs bare scheduler, singles >= 0.8x",
            "0.75x",
            "150.0 vs 200.0 pods/s; 0.9x the floor",
            "**no**",
        ),
        ("fleet (default)", "operator RSS idle <= 80 MB", "70.0 MB", "", "yes"),
        ("fleet (default)", "restart <= 10 s", "-", "", "-"),
    ]


def test_the_table_goes_between_the_markers_and_nowhere_else() -> None:
    start, end = bench_table.START, bench_table.END
    text = f"# T\n\n{start}\nold\n{end}\n\nafter\n"
    assert bench_table.rewrite(text, "| new |\n") == f"# T\n\n{start}\n| new |\n{end}\n\nafter\n"
    with pytest.raises(SystemExit):
        bench_table.rewrite("# no markers\n", "| new |\n")
