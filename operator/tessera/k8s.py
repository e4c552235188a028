"""The only importer of `kubernetes`: every API call Tessera makes (pod creates are sent by
tessera.k8s_aio, as this module makes them), plus the RBAC they need.
Bodies travel as plain dicts; an error answer is translated into tessera.errors here, once
(api_error), for this client and the event loop's (tessera.k8s_aio)."""

from __future__ import annotations

import json
import logging
import re
import ssl
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import pydantic_core
import urllib3
from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.config.config_exception import ConfigException

from tessera import __version__, api
from tessera.errors import ApiError, ClusterUnreachable, Conflict, CRDsMissing, Gone, NotFound
from tessera.watched import resources as watched_resources

F = TypeVar("F", bound=Callable[..., Any])

MERGE_PATCH = "application/merge-patch+json"
FIELD_MANAGER = "tessera"
USER_AGENT = f"tessera/{__version__}"
JSON = "application/json"


@dataclass(frozen=True)
class Request:
    """A request made here and sent by another client (tessera.k8s_aio)."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, order=True)
class Access:
    """One permission a call needs: verb on a resource of an API group."""

    group: str
    resource: str
    verb: str


# Every permission the code below uses, registered by the @uses decorator where the call is
# made, so the chart's ClusterRole can be checked against the code rather than a hand list.
# Calls only leader election makes are kept apart: a single replica does not need them.
_CALLS: set[Access] = set()
_LEADER_CALLS: set[Access] = set()


def uses(group: str, resource: str, *verbs: str, leader_election: bool = False) -> Callable[[F], F]:
    """Declares the permissions a function's API calls need."""

    def register(fn: F) -> F:
        (_LEADER_CALLS if leader_election else _CALLS).update(
            Access(group, resource, v) for v in verbs
        )
        return fn

    return register


def watched(resources: Iterable[tuple[str, str]]) -> set[Access]:
    """What a cache (a watch-list, or a LIST then a watch) of each (group, plural) needs."""
    return {Access(g, r, v) for g, r in resources for v in ("list", "watch")}


# kopf's own needs, beyond the resources it watches: it posts events about the objects it
# handles and discovers resources through the CRDs.
KOPF_BASE = {
    Access("", "events", "create"),
    Access("events.k8s.io", "events", "create"),
    Access("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    Access("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
}


def required_rules(leader_election: bool = False) -> list[dict[str, list[str]]]:
    """The ClusterRole rules the operator needs: calls registered here plus kopf's watches
    (and, with leader election for a standby replica, the Lease calls)."""
    needed = set(_CALLS) | watched(watched_resources()) | KOPF_BASE
    if leader_election:
        needed |= _LEADER_CALLS
    grouped: dict[tuple[str, str], set[str]] = {}
    for access in needed:
        grouped.setdefault((access.group, access.resource), set()).add(access.verb)
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": sorted(verbs)}
        for (group, resource), verbs in sorted(grouped.items())
    ]


def _status_patch(
    namespace: str, name: str, status: dict[str, Any], resource_version: str | None
) -> tuple[str, dict[str, Any]]:
    """A Workload status merge-patch's path and body; with resource_version, it applies only
    over that version."""
    body: dict[str, Any] = {"status": status}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{namespace}/workloads/{name}/status", body


def api_error(status: int, http_reason: str, answer: str | bytes | None) -> ApiError:
    """The Tessera error for an API server's error answer (its Status object, if any)."""
    try:
        body = json.loads(answer or "{}")
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = body.get("message") or http_reason
    reason = body.get("reason") or http_reason
    if status == 404:
        return NotFound(status, reason, message)
    if status == 409:
        return Conflict(status, reason, message)
    if status == 410:
        return Gone(status, reason, message)
    return ApiError(status, reason, message)


class Kube:
    """A thin client over the API server: dict bodies in and out, Tessera errors on failure."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client
        # Named in the API server's audit log, so what the operator asks for can be told from
        # what the controllers, kwok or kubectl ask for (the fleet benchmark counts its LISTs).
        self._api.user_agent = USER_AGENT
        # A pooled keep-alive connection the server closed is retried; anything else fails
        # over to the caller quickly, and the loop retries on its own schedule. Set on the
        # pool manager, which the client built from its configuration already (setting
        # configuration.retries after that changes nothing: urllib3's default of 3 applies).
        # One connection per concurrent writer of the reconcile loop (32 for objects, 4 for
        # pools, 4 for Events), one per watch, and a few more; pods go through tessera.k8s_aio.
        pool_kw = self._api.rest_client.pool_manager.connection_pool_kw
        pool_kw.update(retries=2, maxsize=64)
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> Kube:
        """In-cluster config when running in a pod, else the kubeconfig (or KUBECONFIG)."""
        try:
            if kubeconfig is None and context is None:
                try:
                    config.load_incluster_config()  # type: ignore[no-untyped-call]
                    return cls(client.ApiClient())
                except ConfigException:
                    pass
            client_ = config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
            return cls(client_)
        except (ConfigException, OSError) as err:
            raise ClusterUnreachable(f"no usable kubeconfig: {err}") from err

    @property
    def api_client(self) -> client.ApiClient:
        return self._api

    def connection(self) -> dict[str, Any]:
        """Server and credentials of this client, for kopf's login: kopf then talks to the same
        cluster as identity `--kubeconfig`/`--context` chose, not whatever KUBECONFIG says."""
        cfg = self._api.configuration
        token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if token and token.lower().startswith("bearer "):
            token = token[7:]
        return {
            "server": cfg.host,
            "ca_path": cfg.ssl_ca_cert,
            "insecure": not cfg.verify_ssl,
            "token": token,
            "certificate_path": cfg.cert_file,
            "private_key_path": cfg.key_file,
        }

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        query: dict[str, str] | None,
        content_type: str,
        timeout: float | tuple[float, float],
    ) -> Any:
        """Sends one request; returns the response with its body not yet read (so a watch can
        stream it), or raises the Tessera error for a refusal or an unreachable server.
        The client's configuration makes the URL and headers (host, credentials) and its
        pool manager sends, but the body is encoded here, by pydantic-core's JSON encoder
        (8 us for a pod against json.dumps's 27): the client's own request path, json.dumps
        included, was 8 % of the operator's CPU in a 5,000-node backlog, against 22 % in
        urllib3 itself in a profile (py-spy)."""
        url, headers = self.prepared(method, path, query, content_type)
        data = None if body is None else pydantic_core.to_json(body)
        if isinstance(timeout, tuple):
            limit = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            limit = urllib3.Timeout(total=timeout)
        try:
            raw = self._api.rest_client.pool_manager.request(
                method, url, body=data, headers=headers, timeout=limit, preload_content=False
            )
            resp = rest.RESTResponse(raw)
            if resp.status >= 400:
                resp.read()  # type: ignore[no-untyped-call]
        except Exception as err:  # urllib3 connection errors and the like
            raise self.unreachable(err) from err
        if resp.status >= 400:
            raise api_error(resp.status, str(resp.reason or ""), resp.data)
        return resp

    def tls(self) -> tuple[ssl.SSLContext, str | None]:
        """The TLS this client's configuration asks for (its CA, client certificate and
        hostname check), and the server name to check when set, for the event loop's client
        (tessera.k8s_aio)."""
        cfg = self._api.configuration
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if not cfg.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif cfg.assert_hostname is False:
            context.check_hostname = False
        if cfg.cert_file:
            context.load_cert_chain(cfg.cert_file, cfg.key_file)
        return context, cfg.tls_server_name or None

    @property
    def proxy(self) -> str | None:
        """The proxy this client's configuration sends through, unless no_proxy exempts the
        server (as the Kubernetes client decides)."""
        cfg = self._api.configuration
        if cfg.proxy and not rest.should_bypass_proxies(cfg.host, cfg.no_proxy or ""):
            return str(cfg.proxy)
        return None

    def prepared(
        self, method: str, path: str, query: dict[str, str] | None, content_type: str
    ) -> tuple[str, dict[str, str]]:
        """The URL and headers of a request: the client's configuration makes them (host,
        credentials, a refreshed token), whichever client then sends it (tessera.k8s_aio)."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = list((query or {}).items())
        _, url, headers, _, _ = self._api.param_serialize(
            method,
            path,
            query_params=params,
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        return url, headers

    def unreachable(self, err: Exception) -> ClusterUnreachable:
        host = self._api.configuration.host
        cause = re.search(
            r"\[Errno -?\d+\] [^'\"()]+|timed out|certificate verify failed", str(err)
        )
        why = cause.group(0).strip() if cause else type(err).__name__
        return ClusterUnreachable(f"cannot reach the Kubernetes API server at {host}: {why}")

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> dict[str, Any]:
        """One raw request; no model validation, so any valid object round-trips intact."""
        answer = self._read(self._send(method, path, body, query, content_type, timeout))
        result: dict[str, Any] = pydantic_core.from_json(answer or b"{}")
        return result

    def write(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        """A write whose answer is not needed: the object the server sends back (a pod's 4-5
        KB, a Workload's more) is read off the connection but not decoded."""
        self._read(self._send(method, path, body, query, content_type, 30))

    def _read(self, resp: Any) -> bytes:
        """The whole answer to a request _send sent."""
        try:
            return bytes(resp.read() or b"")
        except Exception as err:
            raise self.unreachable(err) from err

    def watch(
        self, path: str, resource_version: str | None, seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Streams a watch of a collection from a resourceVersion, one event ({type, object})
        at a time, until the server ends it after `seconds`. Bookmarks are asked for, so a
        quiet collection still moves the resourceVersion on and a resumed watch is cheap.
        Without a resourceVersion it is a watch-list: every object first, as ADDED events,
        then a bookmark annotated `k8s.io/initial-events-end`, then the changes."""
        query = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": str(seconds)}
        if resource_version is None:
            query |= {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
        else:
            query["resourceVersion"] = resource_version
        resp = self._send("GET", path, None, query, "application/json", (10, seconds + 30))
        stream = resp.response
        pending = b""
        try:
            for chunk in stream.stream(1 << 16):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield pydantic_core.from_json(line)
        except urllib3.exceptions.HTTPError as err:
            raise self.unreachable(err) from err
        finally:
            stream.release_conn()

    # --- health and preflight -----------------------------------------------------------

    def version(self) -> str:
        """The server's gitVersion; raises ClusterUnreachable when it does not answer."""
        try:
            return str(self.request("GET", "/version", timeout=5).get("gitVersion", "?"))
        except ApiError as err:
            raise ClusterUnreachable(str(err)) from err

    @uses("apiextensions.k8s.io", "customresourcedefinitions", "get")
    def check_crds(self) -> None:
        """Raises CRDsMissing naming the CRDs that are not installed and Established."""
        missing = []
        for plural in ("acceleratorpools", "workloads", "acceleratorquotas"):
            name = f"{plural}.{api.GROUP}"
            try:
                crd = self.request(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
            except NotFound:
                missing.append(name)
                continue
            conds = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
            if conds.get("Established") != "True":
                missing.append(f"{name} (not Established)")
        if missing:
            raise CRDsMissing(
                "Tessera's CRDs are not installed: "
                + ", ".join(missing)
                + ". Install them with `kubectl apply --server-side -f crds/` or the Helm chart."
            )

    # --- pods -----------------------------------------------------------------------------

    @uses("", "pods", "create")
    def pod_create(self, pod: dict[str, Any]) -> Request:
        """The request that creates a pod, sent on the event loop (tessera.k8s_aio): a
        burst's thousands of pod creates cost the operator less CPU there."""
        path = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods"
        url, headers = self.prepared("POST", path, {"fieldManager": FIELD_MANAGER}, JSON)
        return Request("POST", url, headers, pydantic_core.to_json(pod))

    @uses("resource.k8s.io", "resourceclaimtemplates", "create")
    def create_claim_template(self, template: dict[str, Any]) -> bool:
        """Creates a ResourceClaimTemplate (a DRA pool's pods claim their devices from it);
        False when one of that name exists already."""
        ns = template["metadata"]["namespace"]
        try:
            self.write(
                "POST",
                f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates",
                template,
                {"fieldManager": FIELD_MANAGER},
            )
        except Conflict:
            return False
        return True

    @uses("", "services", "create")
    def create_service(self, service: dict[str, Any]) -> bool:
        """Creates a Service; False when one of that name exists already."""
        ns = service["metadata"]["namespace"]
        try:
            self.write(
                "POST",
                f"/api/v1/namespaces/{ns}/services",
                service,
                {"fieldManager": FIELD_MANAGER},
            )
        except Conflict:
            return False
        return True

    @uses("", "pods", "delete")
    def delete_pod(
        self, namespace: str, name: str, uid: str | None = None, force: bool = False
    ) -> bool:
        """Deletes a pod (only the one with `uid` when given; with `force`, at once, without
        waiting for a kubelet to confirm); False when already gone."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if force:
            body["gracePeriodSeconds"] = 0
        try:
            self.write("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)
        except NotFound:
            return False
        except Conflict:  # a different pod with that name now: not ours to delete
            return False
        return True

    # --- status -----------------------------------------------------------------------------

    @uses(api.GROUP, "workloads/status", "patch")
    def patch_workload_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> None:
        """Merge-patches a Workload's status; with resource_version, only if unchanged since."""
        path, body = _status_patch(namespace, name, status, resource_version)
        self.write("PATCH", path, body, {"fieldManager": FIELD_MANAGER}, MERGE_PATCH)

    @uses(api.GROUP, "workloads/status", "patch")
    def workload_status_patch(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> Request:
        """The request patch_workload_status sends, for the event loop (tessera.k8s_aio):
        a visit's status write costs the operator less CPU there (0.42-0.55 ms against
        0.65-0.82 ms from 32 threads, 400 patches over TLS, four runs each)."""
        path, body = _status_patch(namespace, name, status, resource_version)
        url, headers = self.prepared("PATCH", path, {"fieldManager": FIELD_MANAGER}, MERGE_PATCH)
        return Request("PATCH", url, headers, pydantic_core.to_json(body))

    @uses(api.GROUP, "acceleratorpools", "patch")
    def set_pool_finalizers(self, name: str, finalizers: list[str], resource_version: str) -> None:
        """Sets a pool's finalizers, only over the resourceVersion read (a finalizer another
        controller added meanwhile is never dropped)."""
        meta = {"finalizers": finalizers, "resourceVersion": resource_version}
        path = f"/apis/{api.GROUP}/{api.VERSION}/acceleratorpools/{name}"
        self.write("PATCH", path, {"metadata": meta}, {"fieldManager": FIELD_MANAGER}, MERGE_PATCH)

    @uses(api.GROUP, "acceleratorpools/status", "patch")
    def patch_pool_status(self, name: str, status: dict[str, Any]) -> None:
        path = f"/apis/{api.GROUP}/{api.VERSION}/acceleratorpools/{name}/status"
        self.write("PATCH", path, {"status": status}, {"fieldManager": FIELD_MANAGER}, MERGE_PATCH)

    @uses(api.GROUP, "acceleratorquotas/status", "patch")
    def patch_quota_status(self, name: str, status: dict[str, Any]) -> None:
        path = f"/apis/{api.GROUP}/{api.VERSION}/acceleratorquotas/{name}/status"
        self.write("PATCH", path, {"status": status}, {"fieldManager": FIELD_MANAGER}, MERGE_PATCH)

    # --- events -----------------------------------------------------------------------------

    @uses("", "events", "create")
    def post_event(
        self, obj: dict[str, Any], kind: str, reason: str, message: str, warning: bool = False
    ) -> None:
        """Records a core/v1 Event about an object (cluster-scoped objects: in `default`)."""
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'tessera')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": api.API_VERSION,
                "kind": kind,
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": "tessera"},
            "reportingComponent": "tessera.dev/operator",
            "reportingInstance": "tessera",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.write("POST", f"/api/v1/namespaces/{namespace}/events", event)

    # --- leases (leader election between replicas) ------------------------------------------

    @uses("coordination.k8s.io", "leases", "get", leader_election=True)
    def get_lease(self, namespace: str, name: str) -> dict[str, Any]:
        return self.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        )

    @uses("coordination.k8s.io", "leases", "create", leader_election=True)
    def create_lease(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        return self.request(
            "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", body
        )

    @uses("coordination.k8s.io", "leases", "update", leader_election=True)
    def replace_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        """PUT with the read resourceVersion: fails with Conflict if another replica wrote first."""
        meta = lease["metadata"]
        path = f"/apis/coordination.k8s.io/v1/namespaces/{meta['namespace']}/leases/{meta['name']}"
        return self.request("PUT", path, lease)
