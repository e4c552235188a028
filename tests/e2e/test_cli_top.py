"""`tessera top` and `kubectl tessera top` against the real control plane with the operator
running: a pool of its own with one workload that fits and one that waits, read the way a
person reads them (the table) and a script does (`-o json`); the completion script parses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from operator_harness import (
    TESSERA,
    Kubectl,
    Operator,
    drop_pools,
    make_pool,
    namespace,
    wait_for,
    workload,
)


@pytest.fixture
def ns(operator: Operator, installed: Any) -> Iterator[Kubectl]:
    with namespace(installed, "top") as kubectl:
        yield kubectl


def tessera(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TESSERA), *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def kubectl_plugin(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl tessera ...` as a user types it: kubectl finds kubectl-tessera on PATH (its
    own flags must come after the plugin's name, so the kubeconfig comes from KUBECONFIG)."""
    env = {
        **os.environ,
        "PATH": f"{TESSERA.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(cluster.kubeconfig),
    }
    return subprocess.run(
        [str(cluster.bin("kubectl")), "tessera", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def row(table: str, first: str, columns: int) -> list[str]:
    """The cells of the table row whose first cell is `first` (the last of its `columns`
    cells may hold spaces: a reason)."""
    for line in table.splitlines():
        if line.split(None, 1)[:1] == [first]:
            return line.split(None, columns - 1)
    raise AssertionError(f"no row {first!r} in:\n{table}")


def test_top_shows_the_pool_what_runs_there_and_what_waits(ns: Kubectl, installed: Any) -> None:
    pool = f"top-{ns.ns.rsplit('-', 1)[1]}"
    make_pool(ns, pool, nodes=2, devices=4)
    try:
        ns.apply(workload("fits", count=4, pools=[pool]))
        wait_for("fits placed", lambda: ns.status("fits").get("pool") == pool)
        ns.apply(workload("waits", replicas=2, count=4, pools=[pool]))
        message = wait_for("waits says why", lambda: ns.status("waits").get("message"), timeout=30)
        assert not ns.status("waits").get("pool")
        wait_for("fits running", lambda: ns.status("fits").get("phase") == "Running")

        result = tessera(installed, "top")
        assert result.returncode == 0, result.stderr
        out = result.stdout
        print(out)  # what the docs show (pytest -s)
        assert out.splitlines()[0].split() == [
            "POOL", "ACCELERATOR", "NODES", "USED", "FREE", "TOTAL", "WORKLOADS",
        ]  # fmt: skip
        assert row(out, pool, 7) == [pool, "B1", "2/2", "4", "4", "8", "1"]
        assert row(out, f"{ns.ns}/fits", 4) == [f"{ns.ns}/fits", pool, "Running", "1/1"]
        waiting = row(out, f"{ns.ns}/waits", 3)
        assert waiting[2] == message and "no feasible pool has room for 2 pods" in message
        assert "h100" in out and "H100-SXM5-80GB" in out  # the example pools too

        plugin = kubectl_plugin(installed, "top", "-n", ns.ns)
        assert plugin.returncode == 0, plugin.stderr
        assert row(plugin.stdout, pool, 7) == row(out, pool, 7)
        assert row(plugin.stdout, f"{ns.ns}/waits", 3)[2] == message
        assert f"{ns.ns}/" in plugin.stdout and "usage" not in plugin.stdout
        helped = kubectl_plugin(installed, "top", "--help")
        assert helped.stdout.startswith("usage: kubectl tessera top"), helped.stdout

        data = json.loads(tessera(installed, "top", "-n", ns.ns, "-o", "json").stdout)
        mine = next(p for p in data["pools"] if p["name"] == pool)
        assert mine["nodes"] == {"usable": 2, "total": 2}
        assert mine["devices"] == {"used": 4, "free": 4, "total": 8}
        assert [w["name"] for w in mine["workloads"]] == ["fits"]
        assert [(w["namespace"], w["name"], w["reason"]) for w in data["waiting"]] == [
            (ns.ns, "waits", message)
        ]
        only = tessera(installed, "top", "workloads", "-n", ns.ns)
        assert only.stdout.startswith("WORKLOAD ") and f"{ns.ns}/waits" in only.stdout
    finally:
        drop_pools(ns, {pool: 2})


def test_top_against_no_cluster_is_a_clear_error(tmp_path: Any) -> None:
    result = subprocess.run(
        [str(TESSERA), "top", "--kubeconfig", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("tessera: ")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_completion_script_is_valid_bash() -> None:
    script = subprocess.run(
        [str(TESSERA), "completion", "bash"], capture_output=True, text=True, check=True
    ).stdout
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    # Sourced in an interactive-like shell, it registers the completion for `tessera`.
    probe = subprocess.run(
        ["bash", "-c", "source /dev/stdin; complete -p tessera"],
        input=script,
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode == 0 and "tessera" in probe.stdout, probe.stderr


def test_kubectl_completes_the_plugin(installed: Any) -> None:
    """The real kubectl, asked to complete `kubectl tessera ...` (what its completion script
    asks at <TAB>), runs kubectl_complete-tessera from PATH and relays its answer."""
    env = {**os.environ, "PATH": f"{TESSERA.parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def complete(*words: str) -> list[str]:
        proc = subprocess.run(
            [str(installed.bin("kubectl")), "__complete", "tessera", *words],
            capture_output=True, text=True, timeout=60, check=True, env=env,
        )  # fmt: skip
        return proc.stdout.splitlines()

    commands = complete("")
    assert "top\tdevices used and free per pool, what runs there and what waits" in commands
    assert commands[-1] == ":4"  # no file names
    assert complete("top", "--output", "") == ["table", "yaml", "json", ":4"]
    assert complete("plan", "-f", "")[-1] == ":0"  # a file name
