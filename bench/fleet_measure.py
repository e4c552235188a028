"""The fleet benchmark's arithmetic: percentiles, the API server's request counters and who
made each write, what the watch streams saw of pods and Workloads, and the integrity check.
Pure: no I/O, so the rules that turn raw counts into figures are unit-tested."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tessera.watched import resources

WORKLOAD_LABEL = "tessera.dev/workload"
POOL_LABEL = "tessera.dev/pool"
REPLICA_LABEL = "tessera.dev/replica"
GROUP = "tessera.dev"
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})
# The (group, plural) of every kind the operator's caches list and watch, as the operator
# declares them (tessera.watched): a LIST of one of these during a burst or the idle window
# is what a relisting operator would show.
WATCHED = resources()

# The client name (client_name) of the operator's user agent, tessera.k8s.USER_AGENT.
OPERATOR_CLIENT = "tessera"

# (verb, group, resource, subresource): the key of the API server's request counters.
Request = tuple[str, str, str, str]
# A request the API server refused: the key and the response code (409, 422, 429, 5xx...).
Refused = tuple[Request, str]
K = TypeVar("K")


# --- percentiles ------------------------------------------------------------------------------


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0-100), linearly interpolated between the closest ranks."""
    data = sorted(values)
    if not data:
        return None
    pos = (len(data) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def summary(values: Iterable[float]) -> dict[str, float | int | None]:
    """n, p50, p90, p99 and max of latencies in seconds, rounded to the millisecond."""
    data = sorted(values)

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    return {
        "n": len(data),
        "p50": r(percentile(data, 50)),
        "p90": r(percentile(data, 90)),
        "p99": r(percentile(data, 99)),
        "max": r(data[-1] if data else None),
    }


def rate(count: int, start: float | None, end: float | None) -> float | None:
    """count per second between two monotonic times; None when the span is unknown or empty."""
    if start is None or end is None or end <= start:
        return None
    return round(count / (end - start), 1)


def pace(times: Iterable[float]) -> float | None:
    """Events per second from the first to the last: (n - 1) intervals over that span; None
    for fewer than two, or all at once."""
    stamps = sorted(times)
    if len(stamps) < 2 or stamps[-1] <= stamps[0]:
        return None
    return round((len(stamps) - 1) / (stamps[-1] - stamps[0]), 1)


# --- the API server's request counters --------------------------------------------------------

_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _samples(text: str) -> Iterator[tuple[Request, str, int]]:
    """Each apiserver_request_total sample of a /metrics scrape: its request, code, count."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        key = (
            labels.get("verb", ""),
            labels.get("group", ""),
            labels.get("resource", ""),
            labels.get("subresource", ""),
        )
        yield key, labels.get("code", ""), int(float(match["value"]))


def parse_requests(text: str) -> Counter[Request]:
    """apiserver_request_total from a /metrics scrape, summed over codes and the rest."""
    out: Counter[Request] = Counter()
    for key, _, n in _samples(text):
        out[key] += n
    return out


def parse_refused(text: str) -> Counter[Refused]:
    """The requests of apiserver_request_total answered with a code of 400 or more."""
    out: Counter[Refused] = Counter()
    for key, code, n in _samples(text):
        if code.isdigit() and int(code) >= 400:
            out[(key, code)] += n
    return out


def delta(after: Mapping[K, int], before: Mapping[K, int]) -> Counter[K]:
    """Requests between two scrapes (or two snapshots of the bench's own counter)."""
    out: Counter[K] = Counter()
    for key, value in after.items():
        if value - before.get(key, 0):
            out[key] = value - before.get(key, 0)
    return out


def _net(
    requests: Mapping[Request, int], own: Mapping[Request, int]
) -> Iterator[tuple[Request, int]]:
    """The server's counts less the bench's own, where anything is left."""
    for key, n in requests.items():
        if n - own.get(key, 0) > 0:
            yield key, n - own.get(key, 0)


def operator_category(verb: str, group: str, resource: str, subresource: str) -> str | None:
    """The write's category when only the operator makes such writes in the Tessera phase,
    else None. The scheduler writes pods/binding and events.k8s.io events; kwok writes
    pods/status, nodes/status and leases; the bench's own writes are subtracted before."""
    if verb not in WRITE_VERBS:
        return None
    if (group, resource, subresource) == ("", "pods", ""):
        return {"POST": "pod create", "DELETE": "pod delete"}.get(verb)
    if group == GROUP and resource in ("workloads", "acceleratorpools"):
        kind = "workload" if resource == "workloads" else "pool"
        return f"{kind} {subresource or 'object'} {verb.lower()}"
    if (group, resource) == ("", "events") and verb in ("POST", "PATCH", "PUT"):
        return "event"
    return None


def operator_refused(refused: Mapping[Refused, int], own: Mapping[Request, int]) -> dict[str, int]:
    """The operator's writes the API server refused, by category and code (`pod create 409`:
    a create sent again for a pod that exists, e.g. after a timed-out first send). Kinds of
    request the bench also made in the window are left out: a refusal could be either's."""
    out: Counter[str] = Counter()
    for (key, code), n in refused.items():
        category = operator_category(*key)
        if category and not own.get(key):
            out[f"{category} {code}"] += n
    return dict(sorted(out.items()))


def request_name(key: Request) -> str:
    """`PATCH pods/status`, `POST events.k8s.io/events`: a readable name for one counter."""
    verb, group, resource, sub = key
    return f"{verb} {group + '/' if group else ''}{resource}{'/' + sub if sub else ''}"


def attribute(
    requests: Mapping[Request, int], own: Mapping[Request, int]
) -> dict[str, dict[str, Any]]:
    """Splits the writes between two scrapes into the operator's (by category) and the
    others' (by request), after taking out the bench's own (`own`, the same window)."""
    operator: Counter[str] = Counter()
    others: Counter[str] = Counter()
    for key, n in _net(requests, own):
        if key[0] not in WRITE_VERBS:
            continue
        category = operator_category(*key)
        if category:
            operator[category] += n
        else:
            others[request_name(key)] += n
    return {
        "operator": {"total": sum(operator.values()), "byCategory": dict(sorted(operator.items()))},
        "others": {"total": sum(others.values()), "byRequest": dict(others.most_common())},
    }


def lists(requests: Mapping[Request, int], own: Mapping[Request, int]) -> dict[str, int]:
    """LIST requests by resource (`group/resource`), less the bench's own."""
    out: Counter[str] = Counter()
    for key, n in _net(requests, own):
        verb, group, resource, _ = key
        if verb == "LIST":
            out[f"{group + '/' if group else ''}{resource}"] += n
    return dict(sorted(out.items()))


def client_name(user_agent: str) -> str:
    """The program behind a user agent: `kube-controller-manager/v1.37.2 (linux/amd64)
    kubernetes/abc/pod-garbage-collector` -> `kube-controller-manager/pod-garbage-collector`,
    `tessera/0.1.0` -> `tessera`."""
    product, _, rest = user_agent.partition("/")
    parts = rest.split(" ", 2)
    if len(parts) == 3 and parts[2].startswith("kubernetes/"):  # client-go's default form
        component = parts[2].split("/", 2)[2:]
        if component and component[0]:
            return f"{product}/{component[0]}"
    return product or "unnamed"


def audited_lists(lines: Iterable[str]) -> dict[str, dict[str, int]]:
    """LISTs in an API server audit log (JSON lines), by client and then resource."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut by rotation
        if event.get("verb") != "list" or event.get("stage") != "ResponseComplete":
            continue
        ref = event.get("objectRef") or {}
        group = ref.get("apiGroup") or ""
        resource = f"{group + '/' if group else ''}{ref.get('resource', '?')}"
        out[client_name(event.get("userAgent") or "")][resource] += 1
    return {client: dict(sorted(c.items())) for client, c in sorted(out.items())}


def watched_lists(by_resource: Mapping[str, int]) -> int:
    """LISTs of the resources the operator watches (what a relisting operator would show)."""
    names = {f"{g + '/' if g else ''}{r}" for g, r in WATCHED}
    return sum(n for name, n in by_resource.items() if name in names)


# --- what the watch streams saw ---------------------------------------------------------------


@dataclass
class PodTracker:
    """First-seen, first-bound and first-Running time of every pod of one namespace, from a
    watch stream (Running: kwok's simulated kubelet has started it).

    `group_label` names the label that ties a pod to its workload (Tessera's workload label,
    or the baseline's group label). With keep_first, the first event line of each pod is
    kept as received, so the baseline can replay the pods Tessera created.
    """

    group_label: str
    keep_first: bool = False
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    group: dict[str, str] = field(default_factory=dict)
    uids: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    first: dict[str, bytes] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def handle(self, kind: str, obj: Mapping[str, Any], t: float, raw: bytes) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        with self.lock:
            if kind == "DELETED":
                self.live.discard(name)
                return
            self.live.add(name)
            self.uids[name].add(meta.get("uid", ""))
            if name not in self.created:
                self.created[name] = t
                self.group[name] = (meta.get("labels") or {}).get(self.group_label, name)
                if self.keep_first:
                    self.first[name] = raw
            if name not in self.bound and (obj.get("spec") or {}).get("nodeName"):
                self.bound[name] = t
            if name not in self.running and (obj.get("status") or {}).get("phase") == "Running":
                self.running[name] = t

    def counts(self) -> tuple[int, int, int]:
        """Pods seen, pods bound, pods that exist now."""
        with self.lock:
            return len(self.created), len(self.bound), len(self.live)

    def members(self) -> dict[str, list[str]]:
        """Pod names by workload (or baseline group)."""
        out: dict[str, list[str]] = defaultdict(list)
        with self.lock:
            for pod, group in self.group.items():
                out[group].append(pod)
        return dict(out)

    def recreated(self) -> int:
        """Pods created again under a name that already had a pod (a second uid)."""
        with self.lock:
            return sum(len(u) - 1 for u in self.uids.values() if u)

    def first_objects(self) -> list[dict[str, Any]]:
        """The pods as first seen, in the order they were created."""
        with self.lock:
            order = sorted(self.first, key=self.created.__getitem__)
            raws = [self.first[name] for name in order]
        return [json.loads(raw)["object"] for raw in raws]


@dataclass
class WorkloadTracker:
    """When each Workload of one namespace got a pool, reached phase Running, and had every
    replica ready (status.readyReplicas), from a watch stream."""

    placed: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)
    pool: dict[str, str] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def handle(self, kind: str, obj: Mapping[str, Any], t: float, raw: bytes) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        status = obj.get("status") or {}
        replicas = (obj.get("spec") or {}).get("replicas", 1)
        with self.lock:
            if kind == "DELETED":
                self.live.discard(name)
                return
            self.live.add(name)
            if status.get("pool") and name not in self.placed:
                self.placed[name] = t
                self.pool[name] = status["pool"]
            if status.get("phase") == "Running" and name not in self.running:
                self.running[name] = t
            if status.get("readyReplicas", 0) >= replicas and name not in self.ready:
                self.ready[name] = t

    def counts(self) -> tuple[int, int, int, int]:
        """Workloads placed, Running, with every replica ready, existing now."""
        with self.lock:
            return len(self.placed), len(self.running), len(self.ready), len(self.live)


def _last(pods: list[str], times: Mapping[str, float], size: int) -> float | None:
    """The last of a workload's `size` pods' `times`; None while any is missing."""
    stamps = [times[p] for p in pods if p in times]
    return max(stamps) if len(stamps) >= size else None


def group_latencies(
    starts: Mapping[str, float],
    members: Mapping[str, list[str]],
    times: Mapping[str, float],
    sizes: Mapping[str, int],
) -> tuple[list[float], list[str]]:
    """For each workload: from its creation (`starts`) to the last of its `sizes[w]` pods'
    `times`; and the workloads that have not got there."""
    done, missing = [], []
    for name, start in starts.items():
        last = _last(members.get(name, []), times, sizes[name])
        if last is None:
            missing.append(name)
        else:
            done.append(last - start)
    return done, missing


def slowest(
    starts: Mapping[str, float],
    members: Mapping[str, list[str]],
    created: Mapping[str, float],
    bound: Mapping[str, float],
    sizes: Mapping[str, int],
    share: float = 0.01,
) -> dict[str, Any]:
    """Where the slowest `share` of a burst's bound workloads lost their time: when in the
    burst each was created (seconds after the first create), creation to its last pod
    created, and that to its last pod bound. A tail made mid-burst by a few workloads points
    at a retry or a queue; one made by the last ones created, at throughput."""
    split = []
    for name, start in starts.items():
        pods = members.get(name, [])
        made, done = _last(pods, created, sizes[name]), _last(pods, bound, sizes[name])
        if made is not None and done is not None:
            split.append((done - start, start, made - start))
    if not split:
        return {"n": 0}
    split.sort(reverse=True)
    tail = split[: max(1, round(len(split) * share))]
    first = min(starts.values())
    return {
        "n": len(tail),
        "createdAtOffset": summary(start - first for _, start, _ in tail),
        "earliestCreatedAtOffset": round(min(start for _, start, _ in tail) - first, 3),
        "toPodsCreated": summary(made for _, _, made in tail),
        "podsCreatedToBound": summary(total - made for total, _, made in tail),
    }


# --- the pools' status after a burst ---------------------------------------------------------


def devices_by_pool(workloads: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """The devices each pool holds once every Workload's pods exist (each Workload is
    allowed on exactly one pool: fleet_specs.workload_manifest)."""
    out: Counter[str] = Counter()
    for w in workloads:
        spec = w["spec"]
        need = spec["accelerator"]
        out[need["pools"][0]] += int(spec.get("replicas", 1)) * int(need.get("count", 1))
    return out


def pools_uncounted(
    pools: Iterable[Mapping[str, Any]], want: Mapping[str, int]
) -> dict[str, tuple[int | None, int]]:
    """Pools whose status does not show `want` devices allocated: name -> (shown, wanted).
    A pool missing from `want` should show none."""
    out = {}
    for pool in pools:
        name = pool["metadata"]["name"]
        shown = ((pool.get("status") or {}).get("devices") or {}).get("allocated")
        if shown != want.get(name, 0):
            out[name] = (shown, want.get(name, 0))
    return out


# --- integrity after a restart ----------------------------------------------------------------


def integrity(
    workloads: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """Every Workload has exactly `replicas` pods with replica indexes 0..replicas-1 on its
    pool (else duplicated or missing), and every pod with Tessera's workload label belongs
    to a Workload that exists (owner uid) and sits on that Workload's pool (else orphaned)."""
    by_name = {w["metadata"]["name"]: w for w in workloads}
    mine: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    orphans, total = [], 0
    for pod in pods:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        name = labels.get(WORKLOAD_LABEL)
        if name is None:
            continue
        total += 1
        owner = next(
            (
                o.get("uid")
                for o in meta.get("ownerReferences") or []
                if o.get("kind") == "Workload"
            ),
            None,
        )
        workload = by_name.get(name)
        if (
            workload is None
            or owner != workload["metadata"].get("uid")
            or labels.get(POOL_LABEL) != (workload.get("status") or {}).get("pool")
        ):
            orphans.append(meta["name"])
        else:
            mine[name].append(pod)
    duplicated, missing, unbound = [], [], 0
    for name, workload in by_name.items():
        replicas = int(workload["spec"].get("replicas", 1))
        indexes = [(p["metadata"].get("labels") or {}).get(REPLICA_LABEL) for p in mine[name]]
        unbound += sum(1 for p in mine[name] if not (p.get("spec") or {}).get("nodeName"))
        if len(indexes) > replicas or len(set(indexes)) < len(indexes):
            duplicated.append(name)
        elif set(indexes) != {str(i) for i in range(replicas)}:
            missing.append(name)
    return {
        "workloads": len(by_name),
        "pods": total,
        "duplicated": sorted(duplicated),
        "orphans": sorted(orphans),
        "missing": sorted(missing),
        "unbound": unbound,
        "ok": not (duplicated or orphans or missing),
    }
