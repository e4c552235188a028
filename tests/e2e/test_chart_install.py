"""The admin's journey with the Helm chart on the real control plane: `helm install` into a
namespace that enforces Pod Security `restricted` (kwok runs the operator pod on a system
node), RBAC checked by impersonating the chart's ServiceAccount, `helm upgrade` to HA with
monitoring, and `helm uninstall`, which leaves the CRDs and the users' objects in place.

The stages are fixtures that build on each other (installed -> upgraded -> uninstalled), so
each test sees the release in the state it names, whichever tests run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import (
    MONITORING_CRDS,
    REPO,
    TESSERA_CRDS,
    access,
    adopt_crds,
    allowed_as,
    crd_name,
    crds_present,
    helm,
    namespace,
    unique,
)
from operator_harness import Operator, wait_for

from tessera.k8s import required_rules

RELEASE = "tessera-e2e"  # cluster-scoped names (the ClusterRoles) start with this
SYSTEM_NODES = "node-role\\.kubernetes\\.io/system="  # --set syntax: the system nodes' label

# Values an admin would set on a cluster like the test fleet: the operator on system nodes.
INSTALL = ["--set", f"nodeSelector.{SYSTEM_NODES}", "--set", "operator.logFormat=text"]
UPGRADE = [
    *INSTALL,
    "--set", "ha.enabled=true",
    "--set", "metrics.serviceMonitor.enabled=true",
    "--set", "metrics.prometheusRule.enabled=true",
    "--set", "resources.limits.memory=768Mi",
    "--set", "operator.logFormat=json",
]  # fmt: skip

# Verbs a ClusterRole rule can grant on a resource; whatever required_rules() does not list
# for a resource it names must be denied.
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]

# What the operator must never be able to do, whatever its rules say.
DENIED = [
    access("", "secrets", "get"),
    access("", "secrets", "list"),
    access("", "secrets", "watch"),
    access("", "secrets", "get", namespace="kube-system"),
    access("", "nodes", "delete"),
    access("", "nodes", "patch"),
    access("", "nodes", "update"),
    access("", "namespaces", "delete"),
    access("", "pods/exec", "create"),
    access("", "pods/eviction", "create"),
    access("", "serviceaccounts/token", "create"),
    access("", "configmaps", "get"),
    access("rbac.authorization.k8s.io", "clusterroles", "escalate"),
    access("rbac.authorization.k8s.io", "clusterroles", "bind"),
    access("rbac.authorization.k8s.io", "clusterroles", "update"),
    access("rbac.authorization.k8s.io", "clusterrolebindings", "create"),
    access("rbac.authorization.k8s.io", "roles", "create", namespace="default"),
    access("rbac.authorization.k8s.io", "rolebindings", "create", namespace="default"),
    access("", "users", "impersonate"),
    access("", "serviceaccounts", "impersonate"),
    access("apiextensions.k8s.io", "customresourcedefinitions", "create"),
    access("apiextensions.k8s.io", "customresourcedefinitions", "delete"),
    access("apps", "deployments", "create"),
    access("admissionregistration.k8s.io", "validatingwebhookconfigurations", "create"),
]


@dataclass
class Release:
    name: str
    namespace: str
    cluster: Any

    @property
    def account(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    def get(self, kind: str, name: str, namespaced: bool = True) -> dict[str, Any] | None:
        where = ["-n", self.namespace] if namespaced else []
        proc = self.cluster.kubectl("get", kind, name, *where, "-o", "yaml", check=False)
        return yaml.safe_load(proc.stdout) if proc.returncode == 0 else None

    def pods(self) -> list[dict[str, Any]]:
        proc = self.cluster.kubectl(
            "get", "pods", "-n", self.namespace, "-o", "yaml",
            "-l", f"app.kubernetes.io/instance={self.name}",
        )  # fmt: skip
        items: list[dict[str, Any]] = yaml.safe_load(proc.stdout)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def running(self, count: int) -> list[dict[str, Any]]:
        """Waits until exactly `count` current pods run (old ones gone) and returns them."""

        def check() -> list[dict[str, Any]] | None:
            pods = self.pods()
            ok = len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)
            return pods if ok else None

        pods: list[dict[str, Any]] = wait_for(f"{count} operator pod(s) Running", check, 90)
        return pods


def _pool(name: str) -> dict[str, Any]:
    pool: dict[str, Any] = yaml.safe_load((REPO / "examples" / "pools" / "a100.yaml").read_text())
    pool["metadata"] = {"name": name}
    return pool


def _workload(name: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "tessera.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "accelerator": {"count": 1},
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.37"}],
                }
            },
        },
    }


# --- the journey, stage by stage -----------------------------------------------------------------


@pytest.fixture(scope="module")
def monitoring(cluster: Any) -> Iterator[None]:
    """The Prometheus Operator's CRDs, as a cluster with it has them (for the upgrade)."""
    with crds_present(cluster, [MONITORING_CRDS]):
        yield


@pytest.fixture(scope="module")
def installed(cluster: Any, monitoring: None) -> Iterator[Release]:
    with namespace(cluster, unique("tessera-helm")) as ns:
        adopt_crds(cluster, RELEASE, ns)
        helm(cluster, "install", RELEASE, str(REPO / "charts" / "tessera"), "-n", ns, *INSTALL)
        release = Release(RELEASE, ns, cluster)
        try:
            yield release
        finally:
            helm(cluster, "uninstall", RELEASE, "-n", ns, "--wait", check=False)


@pytest.fixture(scope="module")
def upgraded(installed: Release) -> Release:
    helm(
        installed.cluster, "upgrade", RELEASE, str(REPO / "charts" / "tessera"),
        "-n", installed.namespace, *UPGRADE,
    )  # fmt: skip
    return installed


@pytest.fixture(scope="module")
def user_objects(upgraded: Release) -> Iterator[tuple[str, str, str]]:
    """A pool and a workload (in a users' namespace) created while Tessera was installed."""
    cluster, pool, workload = upgraded.cluster, unique("chart-e2e"), unique("chart-e2e")
    with namespace(cluster, unique("chart-e2e-users"), pss=None) as ns:
        docs = [_pool(pool), _workload(workload, ns)]
        cluster.kubectl("create", "-f", "-", input="---\n".join(yaml.safe_dump(d) for d in docs))
        try:
            yield pool, ns, workload
        finally:
            cluster.kubectl("delete", "acceleratorpool", pool, "--wait=false", check=False)


@pytest.fixture(scope="module")
def uninstalled(upgraded: Release, user_objects: tuple[str, str, str]) -> Release:
    helm(upgraded.cluster, "uninstall", RELEASE, "-n", upgraded.namespace, "--wait")
    return upgraded


# --- install -----------------------------------------------------------------------------------


def test_install_creates_the_objects_and_kwok_runs_the_operator(installed: Release) -> None:
    status = helm(installed.cluster, "status", RELEASE, "-n", installed.namespace, "-o", "yaml")
    assert yaml.safe_load(status.stdout)["info"]["status"] == "deployed"
    for kind, name in [
        ("deployment", RELEASE),
        ("serviceaccount", RELEASE),
        ("service", f"{RELEASE}-metrics"),
    ]:
        assert installed.get(kind, name), f"{kind}/{name} missing"
    for kind, name in [("clusterrole", RELEASE), ("clusterrolebinding", RELEASE)]:
        assert installed.get(kind, name, namespaced=False), f"{kind}/{name} missing"
    for path in TESSERA_CRDS:
        crd = installed.get("crd", crd_name(path), namespaced=False)
        assert crd and crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

    (pod,) = installed.running(1)
    node = installed.get("node", pod["spec"]["nodeName"], namespaced=False)
    assert node and "node-role.kubernetes.io/system" in node["metadata"]["labels"]
    assert pod["spec"]["serviceAccountName"] == RELEASE
    args = pod["spec"]["containers"][0]["args"]
    assert "--log-format=text" in args and "--leader-elect" not in args
    deployment = installed.get("deployment", RELEASE)
    assert deployment and deployment["spec"]["strategy"]["type"] == "Recreate"


def test_the_namespace_enforces_restricted_and_admitted_the_pod(installed: Release) -> None:
    """The pod exists in a namespace whose admission enforces `restricted`: the API server's
    own PodSecurity admission accepted it (a violating pod is refused at creation)."""
    ns = installed.get("namespace", installed.namespace, namespaced=False)
    assert ns and ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    (pod,) = installed.running(1)
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    events = installed.cluster.kubectl(
        "get", "events", "-n", installed.namespace, "--field-selector", "reason=FailedCreate"
    ).stdout
    assert "PodSecurity" not in events


def _triples(rules: list[dict[str, list[str]]]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
        for v in rule["verbs"]
    }  # fmt: skip


def _rule_checks(release: Release, ha: bool) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(allowed, denied) accesses from the code's rules (tessera.k8s.required_rules): every
    verb of every rule, at cluster scope and in another namespace; every other verb on the
    same resources denied. Leader election's rules hold in the release namespace only."""
    single = _triples(required_rules(False))
    election = _triples(required_rules(True)) - single
    allow: list[dict[str, str]] = []
    deny: list[dict[str, str]] = []
    for group, resource in sorted({(g, r) for g, r, _ in single | election}):
        for verb in VERBS:
            if (group, resource, verb) in single:
                allow += [access(group, resource, verb), access(group, resource, verb, "default")]
            elif (group, resource, verb) in election:
                here = access(group, resource, verb, release.namespace)
                (allow if ha else deny).append(here)
                deny += [access(group, resource, verb), access(group, resource, verb, "default")]
            else:
                deny += [access(group, resource, verb), access(group, resource, verb, "default")]
    return allow, deny


def _check_rbac(release: Release, ha: bool) -> None:
    allow, deny = _rule_checks(release, ha)
    checks = allow + deny + DENIED
    verdicts = dict(
        zip(map(repr, checks), allowed_as(release.cluster, release.account, checks), strict=True)
    )
    refused = [a for a in allow if not verdicts[repr(a)]]
    assert not refused, f"the operator's own calls are forbidden: {refused}"
    granted = [a for a in deny + DENIED if verdicts[repr(a)]]
    assert not granted, f"the ServiceAccount may do more than the code needs: {granted}"


def test_rbac_allows_every_call_the_code_makes_and_nothing_else(installed: Release) -> None:
    _check_rbac(installed, ha=False)


def test_kubectl_auth_can_i_as_the_service_account(installed: Release) -> None:
    """The same answers through `kubectl auth can-i --as`, as an admin would ask."""
    cluster, account = installed.cluster, installed.account

    def can_i(*args: str) -> str:
        proc = cluster.kubectl("auth", "can-i", *args, f"--as={account}", check=False)
        return str(proc.stdout.strip())

    assert can_i("list", "pods", "--all-namespaces") == "yes"
    assert can_i("create", "pods", "-n", "default") == "yes"
    assert can_i("patch", "workloads.tessera.dev", "--subresource=status", "-A") == "yes"
    assert can_i("watch", "nodes") == "yes"
    assert can_i("get", "secrets", "--all-namespaces") == "no"
    assert can_i("get", "secrets", "-n", installed.namespace) == "no"
    assert can_i("delete", "nodes") == "no"
    assert can_i("escalate", "clusterroles.rbac.authorization.k8s.io") == "no"
    assert can_i("bind", "clusterroles.rbac.authorization.k8s.io") == "no"
    proc = cluster.kubectl("get", "secrets", "-A", f"--as={account}", check=False)
    assert proc.returncode != 0 and "Forbidden" in proc.stderr


def test_users_get_workloads_through_the_edit_role(installed: Release) -> None:
    """The chart's user role, bound in one namespace, lets a user run Workloads there and
    nowhere else, and never lets them change the fleet's pools."""
    cluster, ns, user = installed.cluster, installed.namespace, unique("alice")
    cluster.kubectl(
        "create", "rolebinding", f"{user}-tessera", "-n", ns,
        f"--clusterrole={RELEASE}-edit", f"--user={user}",
    )  # fmt: skip
    checks = [
        access("tessera.dev", "workloads", "create", ns),
        access("tessera.dev", "workloads", "delete", ns),
        access("tessera.dev", "workloads", "create", "default"),
        access("tessera.dev", "workloads/status", "patch", ns),
        access("tessera.dev", "acceleratorpools", "create"),
        access("tessera.dev", "acceleratorpools", "patch"),
    ]
    assert allowed_as(cluster, user, checks) == [True, True, False, False, False, False]


# --- upgrade -------------------------------------------------------------------------------------


def test_upgrade_switches_on_ha_and_monitoring(upgraded: Release) -> None:
    status = helm(upgraded.cluster, "status", RELEASE, "-n", upgraded.namespace, "-o", "yaml")
    info = yaml.safe_load(status.stdout)
    assert info["version"] == 2 and info["info"]["status"] == "deployed"
    pods = upgraded.running(2)
    for pod in pods:
        container = pod["spec"]["containers"][0]
        assert "--leader-elect" in container["args"]
        assert f"--lease-name={RELEASE}" in container["args"]
        assert f"--lease-namespace={upgraded.namespace}" in container["args"]
        assert "--log-format=json" in container["args"]
        assert container["resources"]["limits"]["memory"] == "768Mi"
    # Spreading is a preference (a single schedulable node must still run both), so the
    # check is that the scheduler is asked to, not where this run happened to put them.
    anti = pods[0]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100
    assert upgraded.get("role", f"{RELEASE}-leader-election")
    assert upgraded.get("rolebinding", f"{RELEASE}-leader-election")
    assert upgraded.get("poddisruptionbudget", RELEASE)
    assert upgraded.get("servicemonitor", RELEASE)
    rule = upgraded.get("prometheusrule", RELEASE)
    assert rule
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "TesseraOperatorDown",
        "TesseraWorkloadsWaitingTooLong",
        "TesseraPoolDegraded",
    } <= alerts
    deployment = upgraded.get("deployment", RELEASE)
    assert deployment and deployment["spec"]["strategy"]["type"] == "RollingUpdate"


def test_rbac_with_leader_election(upgraded: Release) -> None:
    _check_rbac(upgraded, ha=True)


def test_a_typo_in_values_fails_the_upgrade(upgraded: Release) -> None:
    proc = helm(
        upgraded.cluster, "upgrade", RELEASE, str(REPO / "charts" / "tessera"),
        "-n", upgraded.namespace, *UPGRADE, "--set", "ha.replica=3", check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "additional properties 'replica' not allowed" in proc.stderr
    history = helm(upgraded.cluster, "history", RELEASE, "-n", upgraded.namespace, "-o", "yaml")
    assert len(yaml.safe_load(history.stdout)) == 2, "the failed upgrade made no revision"


def _service_account_kubeconfig(release: Release, path: Path) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount with a bound token from
    the TokenRequest API, exactly what the operator's pod gets mounted."""
    token = release.cluster.kubectl(
        "create", "token", release.name, "-n", release.namespace, "--duration=30m"
    ).stdout.strip()
    admin = yaml.safe_load(release.cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": server}],
        "users": [{"name": "tessera", "user": {"token": token}}],
        "contexts": [{"name": "tessera", "context": {"cluster": "test", "user": "tessera"}}],
        "current-context": "tessera",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def test_the_operator_works_with_only_the_charts_permissions(
    upgraded: Release, user_objects: tuple[str, str, str], tmp_path: Path
) -> None:
    """The proof in practice: `tessera run`, authenticated as the chart's ServiceAccount with
    the HA flags the chart passes, elects itself, places a workload and creates its pods,
    and the API server refuses it nothing."""
    pool, ns, workload = user_objects
    kubeconfig = _service_account_kubeconfig(upgraded, tmp_path / "kubeconfig")
    operator = Operator(
        kubeconfig, tmp_path, "--leader-elect", f"--lease-name={RELEASE}",
        f"--lease-namespace={upgraded.namespace}", name=f"{RELEASE}-operator",
    )  # fmt: skip
    operator.start()
    try:

        def placed() -> dict[str, Any] | None:
            found = upgraded.cluster.kubectl("get", "workload", workload, "-n", ns, "-o", "yaml")
            body: dict[str, Any] = yaml.safe_load(found.stdout)
            status = body.get("status") or {}
            return status if status.get("pool") == pool and status.get("replicas") else None

        status = wait_for("the workload placed on the test pool, with pods", placed, 60)
        assert status["phase"] in ("Placed", "Running")
        lease = upgraded.get("lease", RELEASE)
        assert lease and lease["spec"]["holderIdentity"] == f"{RELEASE}-operator"
    finally:
        operator.stop()
    log = operator.log()
    for refusal in ("Forbidden", "Unauthorized"):  # ApiError: "403 Forbidden: ..."
        assert refusal not in log, f"the API server refused the operator something:\n{log}"


# --- uninstall -----------------------------------------------------------------------------------


def test_uninstall_keeps_the_crds_and_the_users_objects(uninstalled: Release) -> None:
    cluster = uninstalled.cluster
    assert helm(cluster, "status", RELEASE, "-n", uninstalled.namespace, check=False).returncode
    wait_for(
        "the operator's pods to go",
        lambda: not uninstalled.pods(),
        60,
    )
    for kind, name in [("deployment", RELEASE), ("serviceaccount", RELEASE)]:
        assert uninstalled.get(kind, name) is None, f"{kind}/{name} left behind"
    for kind in ("clusterrole", "clusterrolebinding"):
        assert uninstalled.get(kind, RELEASE, namespaced=False) is None, f"{kind} left behind"
    for path in TESSERA_CRDS:
        assert uninstalled.get("crd", crd_name(path), namespaced=False), f"{path.name} deleted"


def test_users_objects_survive_uninstall(
    uninstalled: Release, user_objects: tuple[str, str, str]
) -> None:
    pool, ns, workload = user_objects
    assert uninstalled.get("acceleratorpool", pool, namespaced=False)
    found = uninstalled.cluster.kubectl("get", "workload", workload, "-n", ns, check=False)
    assert found.returncode == 0, found.stderr
