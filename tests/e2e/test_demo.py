"""`make demo` end to end: hack/demo.py in its own state directory (never the developer's
.tessera/), with --no-keep so it stops its operator and control plane when it is done."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack"))

import cluster as local_cluster  # noqa: E402


def _names(directory: Path, kind: str) -> list[str]:
    names = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == kind:
                names.append(doc["metadata"]["name"])
    return names


def test_demo_places_every_example_workload_and_explains_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    workloads = _names(REPO / "examples" / "workloads", "Workload")
    pools = set(_names(REPO / "examples" / "pools", "AcceleratorPool"))
    assert workloads and pools
    try:
        proc = subprocess.run(
            [sys.executable, str(REPO / "hack" / "demo.py"), "--state-dir", str(state),
             "--no-keep", "--timeout", "60"],
            cwd=REPO, capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
    finally:  # whatever happened, leave no operator or control plane behind
        local_cluster.Cluster(state).down(quiet=True)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output

    lines = proc.stdout.splitlines()
    header = next((line for line in lines if "WORKLOAD" in line and "RUNNER-UP" in line), None)
    assert header is not None, f"no placement table with a RUNNER-UP column:\n{output}"
    runner_up_at = header.index("RUNNER-UP")
    table = lines[lines.index(header) + 1 :]
    for name in workloads:
        row = next((line for line in table if line.split()[:1] == [name]), None)
        assert row is not None, f"{name} missing from the table:\n{output}"
        assert row.split()[1] in pools, f"{name} has no pool: {row!r}"
        assert row[runner_up_at:].strip(), f"{name} has no runner-up: {row!r}"

    assert "The fleet (kubectl get acp)" in proc.stdout
    assert not (state / "operator.pid").exists(), "the operator's pid file was left behind"
    assert not (state / "cluster.json").exists(), "--no-keep left the control plane recorded"
