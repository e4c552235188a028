"""A real Prometheus (the pinned build) scrapes the operator with the chart's alert rules
loaded, labelling the target as a ServiceMonitor on the chart's metrics Service would (job
tessera-metrics, namespace tessera-system). After a short burst of workloads under a team
quota, some placed and one waiting, every dashboard panel's query and every alert rule's
signal return series, and Prometheus evaluates every rule without error, none firing."""

from __future__ import annotations

import json
import math
import re
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import (
    Kubectl,
    Operator,
    drop_pools,
    make_pool,
    namespace,
    wait_for,
    workload,
)

import cluster as cluster_mod  # hack/cluster.py
import dashboard  # hack/dashboard.py
import sync_chart

PROMETHEUS = cluster_mod.binaries()["prometheus"]
NAME = "kubernetes.io/metadata.name"
pytestmark = pytest.mark.skipif(
    not PROMETHEUS.exists(), reason=f"{PROMETHEUS} missing: run `make tools` to build it"
)


class Prometheus:
    """One Prometheus server in a temporary folder, scraping and evaluating every second."""

    def __init__(self, workdir: Path, target: str, labels: dict[str, str], job: str) -> None:
        self.workdir, self.port = workdir, cluster_mod.free_port()
        (workdir / "rules.yaml").write_text(yaml.safe_dump(sync_chart.rule_file()))
        every = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
        config = {
            "global": every,
            "rule_files": ["rules.yaml"],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [target], "labels": labels}]}
            ],
        }
        (workdir / "prometheus.yaml").write_text(yaml.safe_dump(config))
        self.log = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    str(PROMETHEUS),
                    f"--config.file={self.workdir / 'prometheus.yaml'}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
            )  # fmt: skip
        wait_for("Prometheus ready", self._ready, timeout=60)

    def _ready(self) -> bool:
        assert self.proc and self.proc.poll() is None, self.log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector expr evaluates to now (a scalar result is one sample)."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def metrics_job() -> tuple[str, str]:
    """The job and namespace a ServiceMonitor on the chart's metrics Service gives its target."""
    objects = sync_chart.rendered_objects()
    component = "app.kubernetes.io/component"
    (service,) = (
        o
        for o in objects
        if o["kind"] == "Service" and o["metadata"]["labels"].get(component) == "metrics"
    )
    return service["metadata"]["name"], service["metadata"]["namespace"]


@pytest.fixture(scope="module")
def prometheus(
    operator: Operator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    job, ns = metrics_job()
    server = Prometheus(
        tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{operator.port}", {"namespace": ns}, job
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def ns(operator: Operator, installed: Any) -> Iterator[Kubectl]:
    with namespace(installed, "prom") as kubectl:
        yield kubectl


def finite(series: list[dict[str, Any]]) -> bool:
    """Some series has a number (a quantile of no observations is NaN)."""
    return any(math.isfinite(float(s["value"][1])) for s in series)


def signal(expr: str) -> str:
    """What an alert watches, without its threshold: `absent(up{...} == 1)` watches
    `up{...}`, `max(x) > 3600` watches `max(x)`. It must return series while all is well,
    or the alert could never fire (a misspelt metric or selector)."""
    if expr.startswith("absent(") and expr.endswith(")"):
        expr = expr[len("absent(") : -1]
    return re.sub(r"\s*(==|!=|>=|<=|>|<)\s*[0-9.e+]+$", "", expr.strip())


def test_every_panel_and_rule_returns_series_after_a_burst(
    prometheus: Prometheus, ns: Kubectl
) -> None:
    job, release_ns = metrics_job()
    wait_for(
        "the operator scraped", lambda: prometheus.query(f'up{{job="{job}"}} == 1'), timeout=30
    )
    pool = f"prom-{ns.ns.rsplit('-', 1)[1]}"
    make_pool(ns, pool, nodes=2, devices=4)
    # A team quota over the namespace, large enough to hold nothing back: the per-team panels.
    quota = {
        "apiVersion": "tessera.dev/v1alpha1",
        "kind": "AcceleratorQuota",
        "metadata": {"name": pool},
        "spec": {"namespaceSelector": {"matchLabels": {NAME: ns.ns}}, "nominal": 1000},
    }
    ns("apply", "--server-side", "-f", "-", input=json.dumps(quota))
    try:
        objectives = ("performance", "cost", "energy", "balanced")
        # The burst goes to the example pools (the test pool's made-up B1 would win).
        burst = (
            workload(f"burst-{i}", objective=objectives[i % 4], vendors=["nvidia", "amd"])
            for i in range(8)
        )
        ns.apply(*burst)
        ns.apply(workload("fills", count=4, pools=[pool]))
        wait_for("fills placed", lambda: ns.status("fills").get("pool") == pool)
        ns.apply(workload("waits", replicas=2, count=4, pools=[pool]))
        wait_for("waits says why", lambda: ns.status("waits").get("message"), timeout=30)
        wait_for(
            "the burst placed",
            lambda: all(ns.status(f"burst-{i}").get("pool") for i in range(8)),
            timeout=60,
        )

        empty: dict[str, str] = {}

        def every_panel_draws() -> bool:
            empty.clear()
            for panel in dashboard.PANELS:
                for query in panel.queries:
                    if not finite(prometheus.query(query.expr)):
                        empty[panel.title] = query.expr
            return not empty

        try:
            wait_for("every panel draws", every_panel_draws, timeout=60, every=2)
        except AssertionError:
            raise AssertionError(f"panels with no series: {empty}") from None

        # The gauges trail the statuses by a report (every second) and a scrape.
        wait_for(
            "waits counted Pending",
            lambda: (
                (v := prometheus.query('sum(tessera_workloads{phase="Pending"})'))
                and float(v[0]["value"][1]) >= 1
            ),
            timeout=10,
        )
        oldest = prometheus.query("max(tessera_oldest_pending_workload_seconds)")
        assert float(oldest[0]["value"][1]) > 0
        placed = prometheus.query(
            f'sum by (objective) (tessera_placements_total{{job="{job}",namespace="{release_ns}"}})'
        )
        assert {s["metric"]["objective"] for s in placed} >= set(objectives)

        rules = [r for g in sync_chart.rule_file()["groups"] for r in g["rules"]]
        for rule in rules:
            assert prometheus.query(signal(rule["expr"])), f"{rule['alert']}: {rule['expr']}"
            prometheus.query(rule["expr"])  # and the whole expression is valid PromQL

        def evaluated() -> list[dict[str, Any]]:
            loaded = prometheus.api("rules")["groups"]
            got = [r for g in loaded for r in g["rules"]]
            return got if all(r.get("lastEvaluation", "").startswith("2") for r in got) else []

        loaded = wait_for("every rule evaluated", evaluated, timeout=30)
        assert sorted(r["name"] for r in loaded) == sorted(r["alert"] for r in rules)
        for rule in loaded:
            assert rule["health"] == "ok", rule
            # Not even pending: the selector matches the scrape (a wrong one would make
            # TesseraOperatorDown pending at once), nothing waited an hour, no error.
            assert rule["state"] == "inactive", rule
    finally:
        ns("delete", "acq", pool, "--wait=false", check=False)
        drop_pools(ns, {pool: 2})
