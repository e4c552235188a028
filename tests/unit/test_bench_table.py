"""The benchmark table in README.md and bench/README.md is what hack/bench_table.py makes of
the committed bench/results/*.json: a result committed without `make bench-table` fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench_table  # hack/bench_table.py (hack/ is on the path: tests/conftest.py)
import quality_tables  # hack/quality_tables.py

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("doc", bench_table.DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_table_is_generated_from_the_committed_results(doc: Path) -> None:
    text = doc.read_text()
    assert bench_table.START in text and bench_table.END in text
    assert bench_table.rewrite(text, bench_table.table(bench_table.rows())) == text, (
        f"{doc.name}'s benchmark table differs from bench/results/: run `make bench-table`"
    )


def test_the_quality_tables_are_generated_from_the_committed_results() -> None:
    text = bench_table.BENCH_README.read_text()
    quality = bench_table.load("quality.json", bench_table.RESULTS)
    assert quality is not None
    tables = quality_tables.render(quality)
    assert "| exact | 100 % |" in tables and "LP told the same" in tables
    assert bench_table.rewrite(text, tables, *bench_table.QUALITY) == text, (
        "bench/README.md's quality tables differ from bench/results/: run `make bench-table`"
    )


def test_every_committed_result_has_rows() -> None:
    names = {row[0] for row in bench_table.rows()}
    fleet_runs = sorted(bench_table.RESULTS.glob("fleet-*.json"))
    assert len([n for n in names if n.startswith("fleet (")]) == len(fleet_runs)
    assert any(n.startswith("planning") for n in names)
    assert any(n.startswith("placement quality") for n in names)


def test_a_fleet_run_from_before_the_repeats_shows_no_verdict(tmp_path: Path) -> None:
    """Its targets were withdrawn: one row says it is to be run again, nothing is met."""
    run = {
        "scale": "large",
        "startedAt": "2026-12-05T17:10:00Z",
        "parameters": {"clientPodsPerSecond": None},
        "targets": [
            {"target": "operator RSS idle", "threshold": "<= 80 MB", "measured": 70.0, "met": True}
        ],
    }
    (tmp_path / "fleet-large.json").write_text(json.dumps(run))
    ((name, target, measured, _, verdict),) = bench_table.rows(tmp_path)
    assert name == "fleet (large)" and verdict == "undecided"
    assert target.startswith("not yet run as restated")
    assert "2026-12-05" in measured


def test_the_table_goes_between_the_markers_and_nowhere_else() -> None:
    start, end = bench_table.START, bench_table.END
    text = f"# T\n\n{start}\nold\n{end}\n\nafter\n"
    assert bench_table.rewrite(text, "| new |\n") == f"# T\n\n{start}\n| new |\n{end}\n\nafter\n"
    with pytest.raises(SystemExit):
        bench_table.rewrite("# no markers\n", "| new |\n")


def test_a_fleet_run_of_repeats_shows_spreads_verdicts_and_the_bare_scheduler_as_context(
    tmp_path: Path,
) -> None:
    spread = {"n": 5, "median": 0.97, "min": 0.93, "max": 1.02, "values": []}
    run = {
        "scale": "default",
        "parameters": {"clientPodsPerSecond": None, "repeats": 5},
        "repeats": [],
        "targets": [
            {
                "target": "pods created/s, Tessera / floor, burst of singles",
                "threshold": ">= 0.95x",
                "measured": 0.97,
                "spread": spread,
                "verdict": "undecided",
                "met": None,
                "baseline": "Tessera 190/s, floor 196/s",
            },
            {
                "target": "operator RSS idle",
                "threshold": "<= 80 MB",
                "measured": 70.0,
                "spread": {"n": 1, "median": 70.0, "min": 70.0, "max": 70.0, "values": [70.0]},
                "verdict": "met",
                "met": True,
            },
            {"target": "restart", "threshold": "<= 10 s", "measured": None, "spread": None},
        ],
        "context": [
            {
                "figure": "bound pods/s, singles",
                "unit": "/s",
                "tessera": {"n": 5, "median": 190.0, "min": 180.0, "max": 200.0},
                "floor": {"n": 5, "median": 196.0, "min": 196.0, "max": 196.0},
                "baseline": {"n": 5, "median": 240.5, "min": 230.0, "max": 250.0},
            },
            {"figure": "CPU ms per pod, the whole machine, singles", "unit": " ms"},
            {
                "figure": "creation to all bound p99, gangs",
                "unit": " s",
                "tessera": {"n": 5, "median": 4.0, "min": 4.0, "max": 4.0},
                "floor": {"n": 5, "median": 3.5, "min": 3.5, "max": 3.5},
                "baseline": {"n": 1, "median": 9.0, "min": 9.0, "max": 9.0},
            },
        ],
    }
    (tmp_path / "fleet-default.json").write_text(json.dumps(run))
    name = "fleet (default, median of 5)"
    assert bench_table.rows(tmp_path) == [
        (
            name,
            "pods created/s, Tessera / floor, burst of singles >= 0.95x",
            "0.97x [0.93, 1.02]",
            "Tessera 190/s, floor 196/s",
            "undecided",
        ),
        (name, "operator RSS idle <= 80 MB", "70.0 MB", "", "yes"),
        (name, "restart <= 10 s", "-", "", "-"),
        (
            name,
            "bound pods/s, singles (context, no target)",
            "Tessera 190.0/s [180.0, 200.0]",
            "floor 196.0/s; bare scheduler, pods not pinned: 240.5/s [230.0, 250.0]",
            "-",
        ),
        (
            name,
            "creation to all bound p99, gangs (context, no target)",
            "Tessera 4.0 s",
            "floor 3.5 s; bare scheduler, pods not pinned: 9.0 s (1 of 5 repeats)",
            "-",
        ),
    ]
