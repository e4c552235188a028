"""The fleet benchmark's clean-up between phases: a phase's Workloads, pods and namespace
deleted batch by batch, and waited gone. Imports fleet_context; no other phase."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import urllib3

import fleet_specs as specs
from fleet_context import PODS, WORKLOADS, Bench, Phase
from fleet_kube import BenchError, wait_until

DELETE_THREADS = 4  # clean-up batches deleted at once


def cleanup(bench: Bench, phase: Phase) -> None:
    """Deletes the phase's objects, batch by batch, then its namespace, and waits until
    it is gone and its devices are free. Workloads go first, so the operator never sees
    a Workload without its pods; the pods then go at once (grace period 0)."""
    ns = phase.namespace
    bench.say(f"  deleting {ns}")
    if phase.workloads is not None:
        wl = phase.workloads
        delete_batches(bench, phase, WORKLOADS.format(ns=ns), "Workloads", lambda: wl.counts()[3])
    pods = phase.pods
    delete_batches(
        bench,
        phase,
        PODS.format(ns=ns),
        "pods",
        lambda: pods.counts()[2],
        {"gracePeriodSeconds": "0"},
    )
    bench.api.call("DELETE", f"/api/v1/namespaces/{ns}", ok=(404,))
    wait_until(
        f"namespace {ns} to go",
        lambda: not bench.api.exists(f"/api/v1/namespaces/{ns}"),
        bench.args.timeout + pods.counts()[0] * 0.05,  # its events go with it
        every=10,
        poll=0.5,
    )
    for watch in phase.watches:
        watch.stop()


def delete_batches(
    bench: Bench,
    phase: Phase,
    path: str,
    what: str,
    left: Callable[[], int],
    query: dict[str, str] | None = None,
) -> None:
    """Deletes the phase's objects in the collection at `path`: one collection DELETE per
    clean-up batch, DELETE_THREADS at once, each small enough to end well within the API
    server's request timeout; then one of the whole collection for anything outside the
    batches (nothing, normally). Waits until the watch has seen them go; `left` counts
    those that still exist."""
    ns, total, t0 = phase.namespace, left(), time.monotonic()

    def progress() -> str:
        return f"deleted {total - left():,}/{total:,} {what}"

    selectors = [f"{specs.BATCH_LABEL}={b}" for b in phase.batches]
    timeout = bench.args.timeout + total * 0.05
    pool = ThreadPoolExecutor(DELETE_THREADS, thread_name_prefix="bench-delete")
    try:
        jobs = [
            pool.submit(delete_collection, bench, path, {**(query or {}), "labelSelector": s})
            for s in selectors
        ]
        wait_until(
            f"the {what} in {ns} to be deleted",
            lambda: all(job.done() for job in jobs),
            timeout,
            progress,
            bench.say,
            checks=[phase.check, lambda: _raise_failed(jobs)],
        )
        _raise_failed(jobs)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    delete_collection(bench, path, query)
    wait_until(
        f"the {what} in {ns} to go",
        lambda: left() == 0,
        timeout,
        progress,
        bench.say,
        checks=[phase.check],
    )
    bench.say(f"  {progress()} in {time.monotonic() - t0:.1f} s")


def delete_collection(bench: Bench, path: str, query: dict[str, str] | None = None) -> None:
    """A collection DELETE (of one clean-up batch, or of the whole collection). The API
    server can end it before it is done (a dropped connection, or a 504 after its 60 s
    request timeout; the deletion stops with it), so it is sent again until it completes."""
    for _ in range(20):
        try:
            status, _ = bench.api.call(
                "DELETE", path, query=query, timeout=300, ok=(404, 500, 503, 504)
            )
        except urllib3.exceptions.HTTPError as err:
            status, why = 0, type(err).__name__
        else:
            why = str(status)
        if status < 500 and status != 0:
            return
        bench.say(f"  DELETE {path} ended early ({why}); sending it again")
    raise BenchError(f"DELETE {path} kept ending early")


def _raise_failed(jobs: Sequence[Future[None]]) -> None:
    """Raises the error of the first job that failed, if any has."""
    for job in jobs:
        error = job.exception() if job.done() and not job.cancelled() else None
        if error is not None:
            raise error
