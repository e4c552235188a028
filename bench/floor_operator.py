"""The floor: an operator that costs next to nothing. It watches one namespace's Workloads
and, for each new one, at once creates the pods Tessera created for it in its own burst
(same bodies, same node pin, owned by the new Workload): no placement, no caches, no
status, no Events. The fleet benchmark runs it after its baseline, so Tessera can be read
against the best any operator could do on the same machine, the Workload's own cost
included (bench/README.md, "The floor").

Started by the fleet benchmark (fleet_floor.py) as its own process (as `tessera run` is),
so its CPU is counted apart from the bench's: floor_operator.py --server URL --pki DIR
--namespace NS --resource-version RV --pods FILE, FILE holding {workload name: [pod
bodies]}. With an empty RV it lists the namespace's Workloads first (a backlog), then
watches from the list.
Prints "watching" once its watch is open; runs until killed.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fleet_kube import Api, Watch
from fleet_specs import API_VERSION

WRITERS = 32  # pod creates in flight at once, as in Tessera's reconcile loop
USER_AGENT = "tessera-floor"


def owned(body: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
    """The pod body (Tessera's owner reference kept: fleet_specs.baseline_pod) owned by
    the new Workload of that name: its uid in place of the one Tessera's pod was owned by."""
    uid = workload["metadata"]["uid"]
    owners = [{**o, "uid": uid} for o in body["metadata"].get("ownerReferences") or []]
    return {**body, "metadata": {**body["metadata"], "ownerReferences": owners}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--pki", type=Path, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--resource-version", required=True)
    parser.add_argument("--pods", type=Path, required=True)
    parser.add_argument("--writers", type=int, default=WRITERS)
    args = parser.parse_args(argv)
    pods: dict[str, list[dict[str, Any]]] = json.loads(args.pods.read_text())
    api = Api(args.server, args.pki, connections=args.writers + 2, user_agent=USER_AGENT)
    writers = ThreadPoolExecutor(args.writers, thread_name_prefix="floor-create")
    path = f"/api/v1/namespaces/{args.namespace}/pods"
    seen: set[str] = set()

    def create(body: dict[str, Any]) -> None:
        try:
            api.call("POST", path, body, ok=(409,))
        except Exception as err:  # said, and left: the bench's wait reports what is missing
            print(f"creating {body['metadata']['name']}: {err}", file=sys.stderr, flush=True)

    def handle(kind: str, obj: dict[str, Any], t: float, raw: bytes) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if kind != "ADDED" or name in seen or name not in pods:
            return
        seen.add(name)
        for body in pods[name]:
            writers.submit(create, owned(body, obj))

    workloads = f"/apis/{API_VERSION}/namespaces/{args.namespace}/workloads"
    rv, backlog = args.resource_version, []
    if not rv:  # a backlog: every Workload there now, then what comes after them
        listed = api.get(workloads)
        backlog, rv = listed["items"], listed["metadata"]["resourceVersion"]
    watch = Watch(api, workloads, rv, handle).start()
    print("watching", flush=True)  # before the backlog's creates: the bench samples CPU now
    for obj in backlog:
        handle("ADDED", obj, 0.0, b"")
    while watch.error is None:
        threading.Event().wait(1.0)
    print(f"the watch failed: {watch.error}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
