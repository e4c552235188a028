"""How Tessera ships, checked without a cluster: the Helm chart (lint, templates, schema,
generated parts), the plain manifests in deploy/, the container image recipe, the lock files,
the GitOps and kind examples. Needs the pinned helm and kubectl (`make tools`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tessera import catalog

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack"))

import cluster  # noqa: E402
import lock_requirements  # noqa: E402
import sync_chart  # noqa: E402

CHART = REPO / "charts" / "tessera"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
HELM = cluster.binaries()["helm"]
KUBECTL = cluster.binaries()["kubectl"]

# Every optional feature switched on (the Prometheus Operator kinds need no cluster to render).
ALL_FEATURES = [
    "--set", "ha.enabled=true",
    "--set", "metrics.serviceMonitor.enabled=true",
    "--set", "metrics.prometheusRule.enabled=true",
    "--set", "operator.verbose=true",
    "--set", "operator.namespaces={ml,research}",
    "--set", "image.digest=sha256:" + "0" * 64,
]  # fmt: skip

pytestmark = pytest.mark.skipif(
    not HELM.exists(), reason=f"{HELM} missing: run `make tools` to build the pinned helm"
)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, check=False, timeout=120
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def render(*args: str, namespace: str = "tessera-system") -> list[dict[str, Any]]:
    text = sync_chart.render(CHART, *args, namespace=namespace)
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        out.setdefault(doc["kind"], []).append(doc)
    return out


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs)[kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in by_kind(docs)[kind] if d["metadata"]["name"] == name]
    return found


def rule_set(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) triples, whatever the grouping of the rules."""
    return {
        (g, r, v)
        for rule in rules
        for g in rule.get("apiGroups", [])
        for r in rule.get("resources", [])
        for v in rule.get("verbs", [])
    }


# --- the chart -------------------------------------------------------------------------------


def test_chart_versions_follow_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == PYPROJECT["project"]["version"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == "", "the image tag must default to the appVersion"
    deployment = one(render(), "Deployment")
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/tessera-dev/tessera:{chart['appVersion']}"


@pytest.mark.parametrize("args", [[], ALL_FEATURES], ids=["defaults", "every-feature"])
def test_helm_lint_strict(args: list[str]) -> None:
    proc = helm("lint", "--strict", str(CHART), *args)
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("replica=2", "additional properties 'replica' not allowed"),
        ("ha.enable=true", "additional properties 'enable' not allowed"),
        ("metrics.serviceMonitor.enabeld=true", "additional properties 'enabeld' not allowed"),
        ("ha.replicas=1", "minimum"),
        ("operator.logFormat=yaml", "text"),
        ("operator.unitReference=H100", "H100-SXM5-80GB"),
        ("metrics.serviceMonitor.interval=30sec", "does not match pattern"),
    ],
)
def test_a_typo_in_values_fails(value: str, complaint: str) -> None:
    proc = helm("template", "t", str(CHART), "--set", value, check=False)
    assert proc.returncode != 0, f"--set {value} was accepted"
    assert complaint in proc.stderr, proc.stderr


def test_the_unit_reference_may_be_any_catalog_model_and_only_those() -> None:
    """The chart refuses at install what `tessera run --unit-reference` would refuse at start
    (a crash loop): its schema lists the catalog's models."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    allowed = schema["properties"]["operator"]["properties"]["unitReference"]["enum"]
    assert allowed == catalog.model_names()
    rendered = render("--set", "operator.unitReference=A100-SXM4-80GB")
    (deployment,) = (d for d in rendered if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--unit-reference=A100-SXM4-80GB" in args


def test_default_render_has_exactly_the_core_objects() -> None:
    kinds = sorted(d["kind"] for d in render())
    assert kinds == sorted(
        [
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",  # the operator's
            "ClusterRole",  # users': -edit
            "ClusterRole",  # users': -view
            "ClusterRoleBinding",
            "Service",
            "Deployment",
        ]
    )


def test_every_feature_renders_its_objects() -> None:
    kinds = by_kind(render(*ALL_FEATURES))
    for kind in ("Role", "RoleBinding", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"):
        assert kind in kinds, kind
    crds = {c["metadata"]["name"] for c in kinds["CustomResourceDefinition"]}
    assert crds == {
        "acceleratorpools.tessera.dev",
        "workloads.tessera.dev",
        "acceleratorquotas.tessera.dev",
    }


def test_every_object_carries_the_standard_labels() -> None:
    for doc in render(*ALL_FEATURES):
        labels = doc["metadata"].get("labels", {})
        for key in (
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/version",
            "app.kubernetes.io/managed-by",
            "helm.sh/chart",
        ):
            assert key in labels, f"{doc['kind']} {doc['metadata']['name']} lacks {key}"


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("args", [[], ALL_FEATURES], ids=["defaults", "every-feature"])
def test_deployment_is_hardened(args: list[str]) -> None:
    pod = _pod(render(*args))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert set(container["resources"]) == {"requests", "limits"}
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert pod["automountServiceAccountToken"] is True
    assert "hostNetwork" not in pod and "hostPID" not in pod


def test_without_ha_one_replica_never_overlaps_another() -> None:
    deployment = one(render(), "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith(("--leader-elect", "--lease")) for a in args)
    assert "--metrics-port=8080" in args and "--metrics-address=0.0.0.0" in args


def test_ha_runs_replicas_that_elect_a_leader_in_the_release_namespace() -> None:
    docs = render(*ALL_FEATURES, namespace="ops")
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--leader-elect", "--lease-name=tessera", "--lease-namespace=ops"} <= set(args)
    assert "--namespace=ml" in args and "--namespace=research" in args and "--verbose" in args
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env
    for kind in ("Role", "RoleBinding"):
        assert one(docs, kind)["metadata"]["namespace"] == "ops"
    affinity = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "ghcr.io/tessera-dev/tessera@sha256:" + "0" * 64


def test_the_flags_the_chart_passes_are_the_ones_tessera_run_takes() -> None:
    """The Deployment's args against the real CLI: `tessera run --help` of the installed
    console script must list every flag the chart renders."""
    script = Path(sys.executable).parent / "tessera"
    proc = subprocess.run(
        [str(script), "run", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    args = _pod(render(*ALL_FEATURES))["containers"][0]["args"]
    for flag in {a.split("=")[0] for a in args}:
        assert re.search(rf"(^|[\s,]){re.escape(flag)}\b", proc.stdout), f"{flag} unknown"
    assert "text,json" in proc.stdout  # the log formats the schema allows


# --- generated parts: CRDs, RBAC, deploy/ ---------------------------------------------------------


def test_crd_templates_are_the_generated_crds_kept_on_uninstall() -> None:
    rendered = {c["metadata"]["name"]: c for c in by_kind(render())["CustomResourceDefinition"]}
    sources = sorted((REPO / "crds").glob("*.yaml"))
    assert sorted(rendered) == [p.stem for p in sources]
    for path in sources:
        source = yaml.safe_load(path.read_text())
        crd = rendered[path.stem]
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["spec"] == source["spec"], f"{path.name} drifted: python hack/sync_chart.py"
    assert "CustomResourceDefinition" not in by_kind(render("--set", "crds.enabled=false"))


def test_generated_chart_templates_are_up_to_date() -> None:
    stale = [
        str(p.relative_to(REPO))
        for p, text in sync_chart.chart_files().items()
        if (CHART / p).read_text() != text
    ]
    assert not stale, f"out of date: {stale}; run: python hack/sync_chart.py"
    generated = {CHART / p for p in sync_chart.chart_files()}
    extra = [p for p in (CHART / sync_chart.CRD_DIR).glob("*.yaml") if p not in generated]
    assert not extra, f"CRD templates without a source in crds/: {extra}"


@pytest.mark.parametrize("ha", [False, True], ids=["single", "ha"])
def test_operator_rbac_is_exactly_what_the_code_uses(ha: bool) -> None:
    """The ClusterRole grants what tessera.k8s.required_rules() derives from the code for one
    replica; with HA, a Role in the release namespace adds what leader election needs."""
    from tessera.k8s import required_rules

    docs = render(*(["--set", "ha.enabled=true"] if ha else []), namespace="ops")
    cluster_rules = named(docs, "ClusterRole", "tessera")["rules"]
    assert rule_set(cluster_rules) == rule_set(required_rules(False))
    roles = by_kind(docs).get("Role", [])
    election = rule_set(required_rules(True)) - rule_set(required_rules(False))
    if ha:
        (role,) = roles
        assert role["metadata"]["namespace"] == "ops"
        assert rule_set(role["rules"]) == election
        assert rule_set(cluster_rules) | rule_set(role["rules"]) == rule_set(required_rules(True))
    else:
        assert not roles
    for rules in [cluster_rules, *(r["rules"] for r in roles)]:
        for group, resource, verb in rule_set(rules):
            assert "*" not in (group, resource, verb), "no wildcards"
            assert resource != "secrets", "the operator never reads secrets"
        for rule in rules:
            assert set(rule) == {"apiGroups", "resources", "verbs"}, "no resourceNames or URLs"


def test_user_roles_grant_workloads_and_aggregate_into_the_default_roles() -> None:
    docs = render()
    edit, view = (named(docs, "ClusterRole", f"tessera-{r}") for r in ("edit", "view"))
    labels = edit["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert ("tessera.dev", "workloads", "create") in rule_set(edit["rules"])
    assert {r for _, r, _ in rule_set(edit["rules"]) | rule_set(view["rules"])} <= {
        "workloads",
        "workloads/status",
        "acceleratorpools",
        "acceleratorquotas",
    }
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    for _, resource, verb in rule_set(edit["rules"]) | rule_set(view["rules"]):
        assert resource == "workloads" or verb not in writes, (resource, verb)
    assert all(v in {"get", "list", "watch"} for _, _, v in rule_set(view["rules"]))
    unbound = render("--set", "rbac.aggregateToDefaultRoles=false")
    assert not any(
        k.startswith("rbac.authorization.k8s.io/aggregate")
        for k in named(unbound, "ClusterRole", "tessera-edit")["metadata"]["labels"]
    )
    roles = by_kind(render("--set", "rbac.userRoles=false"))["ClusterRole"]
    assert [r["metadata"]["name"] for r in roles] == ["tessera"]


def test_security_doc_lists_the_operators_permissions() -> None:
    assert sync_chart.SECURITY_DOC.read_text() == sync_chart.security_doc(), (
        "docs/security.md's permission table is out of date: python hack/sync_chart.py"
    )


def test_deploy_manifests_are_the_rendered_chart() -> None:
    expected = sync_chart.deploy_files(CHART)
    stale = [str(p.relative_to(REPO)) for p, t in expected.items() if p.read_text() != t]
    assert not stale, f"out of date: {stale}; run: python hack/sync_chart.py"
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "tessera.yaml").read_text()) if d]
    assert docs[0]["kind"] == "Namespace"
    assert docs[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {d["kind"] for d in docs} >= {"CustomResourceDefinition", "Deployment", "ClusterRole"}


def test_kustomize_builds_the_same_objects() -> None:
    proc = subprocess.run(
        [str(KUBECTL), "kustomize", str(REPO / "deploy")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    built = [d for d in yaml.safe_load_all(proc.stdout) if d]
    plain = [d for d in yaml.safe_load_all((REPO / "deploy" / "tessera.yaml").read_text()) if d]

    def key(d: dict[str, Any]) -> str:
        return f"{d['kind']}/{d['metadata'].get('namespace', '')}/{d['metadata']['name']}"

    assert {key(d): d for d in built} == {key(d): d for d in plain}


def test_alerts_use_metrics_the_operator_exports() -> None:
    from tessera import metrics

    exported = {m.name for m in metrics.REGISTRY.collect()}
    exported |= {s.name for m in metrics.REGISTRY.collect() for s in m.samples}
    rule = one(render("--set", "metrics.prometheusRule.enabled=true"), "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "TesseraOperatorDown",
        "TesseraWorkloadsWaitingTooLong",
        "TesseraPoolDegraded",
    } <= set(alerts)
    for name, alert in alerts.items():
        used = set(re.findall(r"\btessera_[a-z_]+", alert["expr"]))
        # A counter is exported as <name>_total; the registry names the family without it.
        missing = {
            m for m in used if m not in exported and m.removesuffix("_total") not in exported
        }
        assert not missing, f"{name} uses metrics the operator does not export: {missing}"
        assert 'job="tessera-metrics"' in alert["expr"], "scoped to this release's series"
        assert alert["annotations"]["runbook_url"].endswith("#" + name.lower())
    anchors = _anchors(REPO / "docs" / "operations.md")
    for name in alerts:
        assert name.lower() in anchors, f"docs/operations.md has no section for {name}"


def test_operations_doc_lists_exactly_the_exported_metrics() -> None:
    from tessera import metrics

    exported = {
        m.name + ("_total" if m.type == "counter" else "") for m in metrics.REGISTRY.collect()
    }
    text = (REPO / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"^\| `(tessera_[a-z_]+)` \|", text, re.M))
    assert documented == exported, (
        f"undocumented: {exported - documented}; gone: {documented - exported}"
    )


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings."""
    out = set()
    for line in path.read_text().splitlines():
        m = re.match(r"^#+\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(text.replace(" ", "-"))
    return out


# --- the container image ------------------------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instr in _dockerfile():
        if instr[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instr)
    return stages


def test_hadolint_passes_without_ignores() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    proc = subprocess.run(
        [str(hadolint), str(REPO / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hadolint ignore" not in (REPO / "Dockerfile").read_text()


def test_image_is_multi_stage_on_a_pinned_slim_python() -> None:
    defaults = dict(a.split("=", 1) for i, a in _dockerfile() if i == "ARG" and "=" in a)
    assert re.fullmatch(
        r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", defaults["PYTHON_IMAGE"]
    ), defaults["PYTHON_IMAGE"]
    stages = _stages()
    assert len(stages) == 2
    assert stages[0][0][1] == "${PYTHON_IMAGE} AS builder"
    assert stages[1][0][1] == "${PYTHON_IMAGE}"


def test_final_stage_is_non_root_without_build_tools() -> None:
    final = _stages()[-1]
    users = [a for i, a in final if i == "USER"]
    assert users and re.fullmatch(r"[1-9][0-9]*(:[0-9]+)?", users[-1]), users
    assert users[-1].split(":")[0] == "65532"
    runs = " ".join(a for i, a in final if i == "RUN")
    for tool in ("apt-get", "apk", "gcc", "build-essential", "pip install", "make"):
        assert tool not in runs, f"the final stage runs {tool}"
    copies = [a for i, a in final if i == "COPY"]
    assert copies == ["--from=builder /opt/tessera /opt/tessera"]
    labels = " ".join(a for i, a in final if i == "LABEL")
    for key in ("title", "version", "source", "licenses", "revision", "description"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_builder_installs_exactly_the_lock() -> None:
    builder = " ".join(a for i, a in _stages()[0] if i == "RUN")
    assert "--no-deps" in builder and "-r requirements.lock" in builder
    assert "--only-binary=:all:" in builder  # binary wheels: no compiler in either stage
    assert "PIP_NO_CACHE_DIR=1" in " ".join(a for i, a in _stages()[0] if i == "ENV")
    # The image ships the runtime only: neither the dev tools nor their lock.
    assert lock_requirements.DEV_LOCK.name not in (REPO / "Dockerfile").read_text()


def test_entrypoint_is_the_console_script_the_package_installs() -> None:
    (entrypoint,) = [a for i, a in _dockerfile() if i == "ENTRYPOINT"]
    argv = json.loads(entrypoint)  # exec form: no shell between the runtime and the operator
    assert argv == ["tessera", "run"]
    scripts = PYPROJECT["project"]["scripts"]
    assert argv[0] in scripts
    installed = {
        ep.name: ep.value
        for ep in metadata.distribution(PYPROJECT["project"]["name"]).entry_points
        if ep.group == "console_scripts"
    }
    assert installed[argv[0]] == scripts[argv[0]]
    target = metadata.EntryPoint(argv[0], scripts[argv[0]], "console_scripts").load()
    assert callable(target)


def _pins(lock: Path) -> dict[str, str]:
    """Canonical name -> version of every line of a lock file, each an exact pin."""
    locked = {}
    for line in lock.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"{lock.name}: not an exact pin: {line}"
            locked[canonicalize_name(name)] = version
    return locked


def _assert_pinned(deps: list[str], locked: dict[str, str], lock: str) -> None:
    for dep in deps:
        req = Requirement(dep)
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} (pyproject) is not in {lock}"
        assert req.specifier.contains(locked[name], prereleases=True), (dep, locked[name])


def test_lock_pins_every_runtime_dependency_and_their_closure() -> None:
    locked = _pins(lock_requirements.LOCK)
    _assert_pinned(PYPROJECT["project"]["dependencies"], locked, "requirements.lock")
    # The closure: what the locked versions themselves require is locked too, at what the
    # tests ran against (the virtualenv).
    assert locked == lock_requirements.closure(), (
        "requirements.lock is out of date: .venv/bin/python hack/lock_requirements.py"
    )


def test_dev_lock_pins_every_dev_and_bench_extra_and_their_closure() -> None:
    """The tools CI runs (linters, type checker, test runner, benchmark libraries) are pinned
    like the runtime, so an upstream release cannot change what CI runs overnight."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(extras) == lock_requirements.DEV_EXTRAS, "a new extra: lock it or say why not"
    runtime, dev = _pins(lock_requirements.LOCK), _pins(lock_requirements.DEV_LOCK)
    assert not runtime.keys() & dev.keys(), "a package is pinned in one lock only"
    for extra in sorted(extras):
        _assert_pinned(extras[extra], runtime | dev, "requirements(-dev).lock")
    assert dev == lock_requirements.dev_closure(), (
        "requirements-dev.lock is out of date: .venv/bin/python hack/lock_requirements.py"
    )


def test_the_virtualenv_is_installed_at_both_locks() -> None:
    """`make venv` reinstalls when either lock changes and constrains every install by both."""
    makefile = (REPO / "Makefile").read_text().replace("\\\n", " ")
    (rule,) = [line for line in makefile.splitlines() if line.startswith("$(STAMP):")]
    (install,) = [line for line in makefile.splitlines() if "-e '.[dev,bench]'" in line]
    for lock in lock_requirements.LOCKS:
        assert lock.name in rule.split(), f"the virtualenv does not depend on {lock.name}"
        assert f"--constraint {lock.name}" in install, f"make venv ignores {lock.name}"


# --- examples: GitOps and kind -----------------------------------------------------------------


def _yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_argocd_application_installs_the_chart_and_the_pools() -> None:
    docs = _yaml_docs(REPO / "examples" / "gitops" / "argocd" / "tessera.yaml")
    apps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Application"}
    chart_app, pools_app = apps["tessera"], apps["tessera-pools"]
    source = chart_app["spec"]["source"]
    assert (REPO / source["path"] / "Chart.yaml").exists()
    values = source["helm"]["valuesObject"]
    render_with_values(values, chart_app["spec"]["destination"]["namespace"])
    assert (REPO / pools_app["spec"]["source"]["path"]).is_dir()
    wave = "argocd.argoproj.io/sync-wave"
    assert int(chart_app["metadata"]["annotations"][wave]) < int(
        pools_app["metadata"]["annotations"][wave]
    )


def test_flux_helmrelease_installs_the_chart_and_the_pools() -> None:
    root = REPO / "examples" / "gitops" / "flux"
    docs = [d for p in sorted(root.rglob("*.yaml")) for d in _yaml_docs(p)]
    kinds = by_kind(docs)
    (release,) = kinds["HelmRelease"]
    chart = release["spec"]["chart"]["spec"]
    assert (REPO / chart["chart"] / "Chart.yaml").exists()
    assert chart["sourceRef"]["kind"] in {"GitRepository", "HelmRepository"}
    render_with_values(release["spec"]["values"], release["spec"]["targetNamespace"])
    flux = {
        k["metadata"]["name"]: k
        for k in kinds["Kustomization"]
        if k["apiVersion"].startswith("kustomize.toolkit.fluxcd.io/")
    }
    assert (REPO / flux["tessera"]["spec"]["path"] / "helmrelease.yaml").exists()
    assert flux["tessera"]["spec"]["wait"] is True
    pools = flux["tessera-pools"]
    assert (REPO / pools["spec"]["path"]).is_dir()
    assert {"name": "tessera"} in pools["spec"]["dependsOn"]


def render_with_values(values: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """Renders the chart with the given values (the schema validates them)."""
    proc = subprocess.run(
        [str(HELM), "template", "tessera", str(CHART), "-n", namespace, "-f", "-"],
        input=yaml.safe_dump(values), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, vals = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": key in labels and labels[key] in vals,
            "NotIn": key not in labels or labels[key] not in vals,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def test_kind_config_nodes_are_selected_by_the_example_pools() -> None:
    config = yaml.safe_load((REPO / "examples" / "kind" / "kind-config.yaml").read_text())
    assert config["kind"] == "Cluster"
    pools = [_yaml_docs(p)[0] for p in sorted((REPO / "examples" / "pools").glob("*.yaml"))]
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    assert workers
    gpu_workers = [n for n in workers if n.get("labels")]
    assert len(gpu_workers) >= 2
    for node in gpu_workers:
        chosen = [p["metadata"]["name"] for p in pools if _selects(p["spec"]["nodeSelector"],
                                                                     node["labels"])]  # fmt: skip
        assert len(chosen) == 1, f"{node['labels']} selected by {chosen}"
    script = (REPO / "examples" / "kind" / "advertise-devices.sh").read_text()
    assert "--subresource=status" in script
    from tessera import api

    namespace_doc, workload = _yaml_docs(REPO / "examples" / "kind" / "workload.yaml")
    assert namespace_doc["kind"] == "Namespace"
    api.Workload.model_validate(workload)  # the CRD's models accept it


# --- docs ------------------------------------------------------------------------------------


DOCS = ["concepts.md", "operations.md", "troubleshooting.md", "security.md"]


def test_readme_install_sections_are_between_the_markers() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("<!-- install:start -->")[1].split("<!-- install:end -->")[0]
    for heading in ("Install with Helm", "Install with kubectl", "Install with GitOps",
                    "Try it on kind", "Upgrade", "Uninstall"):  # fmt: skip
        assert re.search(rf"^#+ {heading}", section, re.M), heading


@pytest.mark.parametrize("name", [*DOCS, "../README.md"])
def test_doc_links_resolve(name: str) -> None:
    path = REPO / "docs" / name
    text = path.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{name}: broken link {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{name}: no heading for {target}"
