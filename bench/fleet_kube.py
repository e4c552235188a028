"""The fleet benchmark's I/O: raw HTTPS to the API server (no model deserialisation, which
is too slow at 10,000 pods), watch streams, bursts of creates and the operator process."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urllib3

# Annotations only: fleet_measure imports tessera (pydantic), and the floor operator, which
# imports this module, starts without it so its start-up stays as light as it can be.
if TYPE_CHECKING:
    from fleet_measure import Request

TESSERA = Path(sys.executable).parent / "tessera"
USER_AGENT = "tessera-bench"
Handler = Callable[[str, dict[str, Any], float, bytes], None]


class BenchError(RuntimeError):
    """The benchmark could not go on: what failed, and where to look."""


def request_key(method: str, path: str, query: dict[str, str] | None = None) -> Request:
    """The API server's counter key for one request: (verb, group, resource, subresource).
    A GET of a collection is a LIST (WATCH with watch=1); a DELETE of one a DELETECOLLECTION."""
    parts = [p for p in urllib.parse.urlsplit(path).path.split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return (method, "", "", "")
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]  # a namespaced resource
    resource = rest[0] if rest else ""
    named = len(rest) > 1
    sub = rest[2] if len(rest) > 2 else ""
    verb = method
    if method == "GET" and not named:
        verb = "WATCH" if (query or {}).get("watch") in ("1", "true") else "LIST"
    elif method == "DELETE" and not named:
        verb = "DELETECOLLECTION"
    return (verb, group, resource, sub)


class Api:
    """Raw JSON over HTTPS with the cluster's admin client certificate. Counts its own
    requests the way the API server does, so they can be taken out of the server's counts."""

    def __init__(
        self, server: str, pki: Path, connections: int = 32, user_agent: str = USER_AGENT
    ) -> None:
        self.server, self.pki, self.user_agent = server, pki, user_agent
        self.http = urllib3.PoolManager(
            maxsize=connections,
            cert_file=str(pki / "admin.crt"),
            key_file=str(pki / "admin.key"),
            ca_certs=str(pki / "ca.crt"),
            cert_reqs="CERT_REQUIRED",
            retries=False,
            headers={"User-Agent": user_agent},  # how the audit log names the bench
        )
        self._own: Counter[Request] = Counter()
        self._lock = threading.Lock()

    def own(self) -> Counter[Request]:
        """A snapshot of the requests this client has made."""
        with self._lock:
            return Counter(self._own)

    def _count(self, method: str, path: str, query: dict[str, str] | None) -> None:
        key = request_key(method, path, query)
        with self._lock:
            self._own[key] += 1

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        timeout: float = 60,
        ok: Sequence[int] = (),
    ) -> tuple[int, Any]:
        """One request; returns (status, parsed body). Raises on a status >= 400 not in ok."""
        url = self.server + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": self.user_agent,
        }
        self._count(method, path, query)
        resp = self.http.request(method, url, body=data, headers=headers, timeout=timeout)
        if resp.status >= 400 and resp.status not in ok:
            raise BenchError(f"{method} {path}: {resp.status} {resp.data[:300]!r}")
        return resp.status, json.loads(resp.data) if resp.data else None

    def get(self, path: str, **query: str) -> Any:
        return self.call("GET", path, query=query or None)[1]

    def text(self, path: str) -> str:
        """A non-resource GET (e.g. /metrics): not counted by apiserver_request_total."""
        resp = self.http.request("GET", self.server + path, timeout=60)
        if resp.status != 200:
            raise BenchError(f"GET {path}: {resp.status}")
        return str(resp.data.decode())

    def exists(self, path: str) -> bool:
        return self.call("GET", path, ok=(404,))[0] != 404


class Watch:
    """A raw watch stream (one JSON event per line) feeding a handler with each event's
    arrival time. Started before anything is created, from a known resourceVersion, so no
    event is missed; reconnects from the last version it saw if the server closes it."""

    def __init__(self, api: Api, path: str, resource_version: str, handler: Handler) -> None:
        self.api, self.path, self.rv, self.handler = api, path, resource_version, handler
        self.error: BaseException | None = None
        self._established = threading.Event()
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch {path}")

    def start(self) -> Watch:
        self._thread.start()
        if not self._established.wait(30):
            raise BenchError(f"watch on {self.path} did not start within 30s: {self.error}")
        return self

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(OSError):  # the stream may have closed on its own
                resp.shutdown()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._stream()
        except BaseException as err:
            if not self._stop.is_set():
                self.error = err
                self._established.set()

    def _stream(self) -> None:
        query = {
            "watch": "1",
            "allowWatchBookmarks": "false",
            "resourceVersion": self.rv,
            "timeoutSeconds": "3600",
        }
        url = f"{self.api.server}{self.path}?{urllib.parse.urlencode(query)}"
        self.api._count("GET", self.path, query)
        timeout = urllib3.Timeout(connect=10, read=None)
        self._resp = resp = self.api.http.request(
            "GET", url, preload_content=False, timeout=timeout
        )
        if resp.status != 200:
            raise BenchError(f"watch {self.path}: {resp.status} {resp.read()[:300]!r}")
        self._established.set()
        pending = b""
        for chunk in resp.read_chunked(decode_content=True):
            t = time.monotonic()
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    self._event(line, t)
            if self._stop.is_set():
                return

    def _event(self, line: bytes, t: float) -> None:
        event = json.loads(line)
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            raise BenchError(f"watch {self.path} failed: {obj.get('message')}")
        self.rv = (obj.get("metadata") or {}).get("resourceVersion", self.rv)
        self.handler(event["type"], obj, t, line)

    def check(self) -> None:
        """Raises the stream's error, if it failed."""
        if self.error is not None:
            raise BenchError(f"watch {self.path} failed: {self.error}") from self.error


def schedule(groups: Sequence[str], pods: Sequence[int], rate: float) -> list[float]:
    """When each body is due, in seconds after the burst starts, for a client that offers
    `rate` pods per second: a group (a Workload, or the baseline's pods of one Workload) is
    due once the pods of the groups before it have been offered, and all its bodies with it."""
    due: dict[str, float] = {}
    offered = 0
    out = []
    for group, n in zip(groups, pods, strict=True):
        out.append(due.setdefault(group, offered / rate))
        offered += n
    return out


def burst(
    api: Api,
    path: str,
    bodies: Sequence[dict[str, Any]],
    threads: int,
    due: Sequence[float] | None = None,
) -> tuple[dict[str, float], float, float]:
    """POSTs every body as fast as `threads` clients can, or each when it is `due` (seconds
    after the start, from `schedule`); returns each object's client-side creation time (just
    before its POST), and the first and last POST's start and end."""
    encoded = [(b["metadata"]["name"], json.dumps(b).encode()) for b in bodies]
    offsets = list(due) if due is not None else [0.0] * len(encoded)
    starts: dict[str, float] = {}
    ends: list[float] = []
    begin = time.monotonic()

    def post(item: tuple[tuple[str, bytes], float]) -> None:
        (name, data), offset = item
        time.sleep(max(0.0, begin + offset - time.monotonic()))
        starts[name] = time.monotonic()
        api.call("POST", path, data)
        ends.append(time.monotonic())

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bench-post") as pool:
        list(pool.map(post, zip(encoded, offsets, strict=True)))
    return starts, min(starts.values()), max(ends)


def wait_until(
    what: str,
    done: Callable[[], bool],
    timeout: float,
    progress: Callable[[], str] | None = None,
    say: Callable[[str], None] | None = None,
    every: float = 5.0,
    checks: Sequence[Callable[[], None]] = (),
    poll: float = 0.05,
) -> None:
    """Polls `done` (cheap, in memory) until true; says `progress()` every few seconds;
    fails with a clear message after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    next_say = time.monotonic() + every
    while not done():
        for check in checks:
            check()
        now = time.monotonic()
        if now > deadline:
            state = f" ({progress()})" if progress else ""
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}{state}")
        if say and progress and now >= next_say:
            say(f"  waiting for {what}: {progress()}")
            next_say = now + every
        time.sleep(poll)


# --- the operator process ---------------------------------------------------------------------


def proc_figures(pid: int) -> dict[str, float]:
    """RSS now and at its peak (MB, 10^6 bytes) and CPU seconds so far, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024 / 1e6
    return {"rssMB": fields["VmRSS"], "peakRssMB": fields["VmHWM"], "cpuSeconds": cpu_seconds(pid)}


def cpu_seconds(pid: int) -> float:
    """CPU seconds a process has used so far (user and system, all threads), from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")  # fields 14 and 15


class CpuSampler:
    """Samples the CPU seconds of named processes every `every` seconds in a thread, so the
    CPU each used within any window of the run (a burst, from its first create until its
    last pod was bound) can be read afterwards."""

    def __init__(self, pids: Callable[[], dict[str, int]], every: float = 0.25) -> None:
        self.pids, self.every = pids, every
        # (monotonic time, {name: (pid, CPU seconds so far)}); a process that has exited
        # is absent, and a restarted one (a new pid under the same name) starts a new series
        self.samples: list[tuple[float, dict[str, tuple[int, float]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-cpu", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def sample(self) -> None:
        now, cpu = time.monotonic(), {}
        for name, pid in self.pids().items():
            with contextlib.suppress(OSError, IndexError, ValueError):
                cpu[name] = (pid, cpu_seconds(pid))
        self.samples.append((now, cpu))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every)

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds each process used from `start` to `end`, its counter read at each
        end by linear interpolation between the samples around it; only a process sampled
        around both ends, under one pid, is counted."""
        samples = sorted(self.samples, key=lambda s: s[0])  # two threads append
        used = {}
        for name in sorted({n for _, cpu in samples for n in cpu}):
            series = [(t, *cpu[name]) for t, cpu in samples if name in cpu]
            a, b = _at(series, start), _at(series, end)
            if a is not None and b is not None and a[0] == b[0]:  # one process throughout
                used[name] = round(b[1] - a[1], 2)
        return used


def _at(series: list[tuple[float, int, float]], t: float) -> tuple[int, float] | None:
    """(pid, CPU seconds) at time t, interpolated between the two samples around t; None
    outside the samples or where they are of two processes."""
    for (t0, pid0, v0), (t1, pid1, v1) in itertools.pairwise(series):
        if t0 <= t <= t1:
            if pid0 != pid1:
                return None
            return pid0, (v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0))
    return None


class Operator:
    """`tessera run` as a subprocess, its output in a log file; killable like a pod."""

    def __init__(self, kubeconfig: Path, state_dir: Path, port: int) -> None:
        self.kubeconfig, self.state_dir, self.port = kubeconfig, state_dir, port
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.http = urllib3.PoolManager(retries=False)

    @property
    def log_path(self) -> Path:
        return self.state_dir / f"operator-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        argv = [str(TESSERA), "run", "--kubeconfig", str(self.kubeconfig)]
        argv += ["--metrics-address", "127.0.0.1", "--metrics-port", str(self.port)]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**env, "POD_NAME": "tessera-bench"},
            )
        # Recorded where Cluster.down looks, so a crashed run never leaves it behind.
        (self.state_dir / "operator.pid").write_text(str(self.proc.pid))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def healthy(self) -> bool:
        try:
            resp = self.http.request("GET", f"http://127.0.0.1:{self.port}/healthz", timeout=2)
        except urllib3.exceptions.HTTPError:
            return False
        return resp.status == 200

    def check(self) -> None:
        """Raises with the log's tail when the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace").splitlines()[-30:]
            raise BenchError(
                f"the operator exited with {self.proc.returncode}; last lines of "
                f"{self.log_path}:\n" + "\n".join(tail)
            )

    def figures(self) -> dict[str, float]:
        return proc_figures(self.pid)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        (self.state_dir / "operator.pid").unlink(missing_ok=True)


class Floor:
    """bench/floor_operator.py as a subprocess for one burst: it creates, for each new
    Workload of the namespace, the pods Tessera created for it; its output in a log file."""

    def __init__(self, api: Api, state_dir: Path) -> None:
        self.api, self.state_dir = api, state_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, name: str, namespace: str, rv: str, pods: dict[str, list[Any]]) -> None:
        """Starts it on the namespace's Workloads from `rv` (empty: it lists those there
        first); returns once its watch is open."""
        pods_file = self.state_dir / f"{name}-pods.json"
        pods_file.write_text(json.dumps(pods))
        argv = [sys.executable, str(Path(__file__).with_name("floor_operator.py"))]
        argv += ["--server", self.api.server, "--pki", str(self.api.pki)]
        argv += ["--namespace", namespace, "--resource-version", rv, "--pods", str(pods_file)]
        log = self.state_dir / f"{name}.log"
        with log.open("wb") as err:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "watching", or nothing if it exited
        if line.strip() != b"watching":
            self.stop()
            tail = log.read_text(errors="replace").splitlines()[-20:]
            raise BenchError(f"the floor operator did not start; {log}:\n" + "\n".join(tail))

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
