"""`tessera run` fails fast and clearly when it cannot work: no cluster, no CRDs, busy port.
Against real processes: an unreachable address and a second, bare control plane."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from operator_harness import REPO, TESSERA, free_port

sys.path.insert(0, str(REPO / "hack"))
import cluster as local_cluster


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TESSERA), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_unreachable_cluster_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": f"https://127.0.0.1:{port}",
                    "insecure-skip-tls-verify": True,
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    result = run("run", "--kubeconfig", str(kubeconfig), "--metrics-port", str(free_port()))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"127.0.0.1:{port}" in result.stderr or "unreachable" in result.stderr.lower()


def test_missing_kubeconfig_file_is_a_clear_error(tmp_path: Path) -> None:
    result = run("run", "--kubeconfig", str(tmp_path / "nope"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "kubeconfig" in result.stderr


def test_missing_crds_are_named(tmp_path: Path) -> None:
    bare = local_cluster.Cluster(tmp_path / "bare")
    bare.up(fleet=None)
    try:
        result = run(
            "run", "--kubeconfig", str(bare.kubeconfig), "--metrics-port", str(free_port())
        )
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert (
            "workloads.tessera.dev" in result.stderr
            and "acceleratorpools.tessera.dev" in result.stderr
        )
        assert "kubectl apply" in result.stderr
    finally:
        bare.down(quiet=True)


def test_busy_metrics_port_is_a_clear_error(cluster: Any) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    cluster.wait_established(["crd/workloads.tessera.dev"])
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = run(
            "run",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--metrics-address",
            "127.0.0.1",
            "--metrics-port",
            str(port),
        )
    assert result.returncode == 2 and f"127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_explain_prints_the_candidates_table_for_a_missing_workload_too(cluster: Any) -> None:
    result = run("explain", "default/does-not-exist", "--kubeconfig", str(cluster.kubeconfig))
    assert result.returncode == 1 and "not found" in result.stderr
