"""Starts and stops a real local control plane on loopback: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok with a simulated accelerator fleet.

Used by `make cluster-up`/`cluster-down`, the pytest session fixture and the demo. Needs
the binaries `hack/build-tools.sh` builds, openssl, and the kubernetes Python client.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import fleet as fleet_mod

HACK = Path(__file__).resolve().parent
REPO = HACK.parent
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# resourcequota: admission refuses every pod of a namespace with a ResourceQuota whose usage
# no controller has computed, so a quota on accelerators can be tried here as on a cluster.
# endpointslice: fills the EndpointSlices of a Workload's headless Service from kwok's pod IPs,
# so what a replica's DNS name would resolve to can be read (tests/e2e/test_distributed.py).
# horizontalpodautoscaling: an HPA reads a Workload's scale subresource (there are no pod
# metrics here, so it reads the scale and stops there: tests/e2e/test_service_scaling.py).
CONTROLLERS = (
    "garbagecollector,namespace,serviceaccount,serviceaccount-token,root-ca-cert-publisher,"
    "deployment,replicaset,job,podgc,clusterrole-aggregation,resourcequota,endpointslice,"
    "horizontalpodautoscaling,resourceclaim-controller"
)

# Only LISTs are audited (who listed what, not the bodies): rare by design, so the log stays
# small and cheap, and it answers "does anything relist?" per client (its user agent).
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [list]
  - level: None
"""


class ClusterError(RuntimeError):
    """The control plane could not be built, started or reached."""


def versions() -> dict[str, str]:
    out = {}
    for line in (HACK / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tessera"
    return Path(os.environ.get("TESSERA_CACHE", default))


def binaries() -> dict[str, Path]:
    """Path of every component's binary in the version-keyed cache."""
    v = versions()
    root = cache_dir() / "bin"
    k8s = root / f"kubernetes-{v['KUBERNETES_VERSION']}"
    return {
        "etcd": root / f"etcd-{v['ETCD_VERSION']}" / "etcd",
        "kube-apiserver": k8s / "kube-apiserver",
        "kube-controller-manager": k8s / "kube-controller-manager",
        "kube-scheduler": k8s / "kube-scheduler",
        "kubectl": k8s / "kubectl",
        "kwok": root / f"kwok-{v['KWOK_VERSION']}" / "kwok",
        "helm": root / f"helm-{v['HELM_VERSION']}" / "helm",
        "prometheus": root / f"prometheus-{v['PROMETHEUS_VERSION']}" / "prometheus",
        "promtool": root / f"prometheus-{v['PROMETHEUS_VERSION']}" / "promtool",
    }


def ensure_binaries() -> dict[str, Path]:
    """Builds whatever is missing (a no-op when the cache is warm)."""
    bins = binaries()
    if not all(p.exists() for p in bins.values()):
        subprocess.run([str(HACK / "build-tools.sh")], check=True)
    return bins


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000


def free_port(taken: Collection[int] = ()) -> int:
    """A loopback port nothing listens on, below the kernel's ephemeral range. A port from
    bind(("127.0.0.1", 0)) is ephemeral: until the component meant to listen on it starts,
    any outgoing connection (the API server's to etcd) may be given it, and the component
    then fails with "address already in use" (CI saw the scheduler do so)."""
    try:
        ephemeral = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768  # Linux's default
    for _ in range(200):
        port = random.randrange(LOWEST_PORT, ephemeral) if ephemeral > LOWEST_PORT + 1000 else 0
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise ClusterError("found no free port on 127.0.0.1")


def crd_established(crd: dict[str, Any]) -> bool:
    """Whether a CRD's status says the API server serves it (its status may be empty yet)."""
    conds = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conds)


def wait_established(
    kubectl: Callable[..., subprocess.CompletedProcess[str]],
    crds: Iterable[str],
    timeout: float = 60,
) -> None:
    """Waits until the API server serves each CRD (`crd/NAME` or `NAME`), read with `kubectl`
    (a Cluster's or a test handle's). Not `kubectl wait --for=condition=Established`: that
    fails at once, instead of waiting, when it reads a CRD created a moment before whose
    status is still empty (kubernetes/kubernetes#66439: ".status.conditions accessor error:
    <nil> is of the type <nil>")."""
    names = [f"crd/{c.removeprefix('crd/')}" for c in crds]
    deadline = time.monotonic() + timeout
    while True:
        proc = kubectl("get", *names, "-o", "json", check=False)
        if proc.returncode == 0:
            got = json.loads(proc.stdout)
            items = got.get("items", []) if got.get("kind") == "List" else [got]
            waiting = [c["metadata"]["name"] for c in items if not crd_established(c)]
            if len(items) == len(names) and not waiting:
                return
            why = f"not yet Established: {', '.join(waiting)}"
        else:
            why = proc.stderr.strip()
        if time.monotonic() >= deadline:
            raise ClusterError(f"CRDs {' '.join(names)} not served after {timeout:.0f}s ({why})")
        time.sleep(0.2)


def log(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


@dataclass
class Cluster:
    """One local control plane whose state (PKI, etcd data, logs, pids) lives in state_dir."""

    state_dir: Path
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: one JSON line per LIST request, naming its client."""
        return self.logs / "audit.log"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    # --- state on disk ------------------------------------------------------------------

    def _state_file(self) -> Path:
        return self.state_dir / "cluster.json"

    def _save(self) -> None:
        self._state_file().write_text(json.dumps({"ports": self.ports, "pids": self.pids}))

    def load(self) -> bool:
        """Reads the saved ports and pids; False when nothing was started here."""
        try:
            saved = json.loads(self._state_file().read_text())
        except (OSError, ValueError):
            return False
        self.ports, self.pids = saved["ports"], saved["pids"]
        return True

    def running(self) -> list[str]:
        """Components whose recorded process is still alive."""
        alive = []
        for name, pid in self.pids.items():
            proc = self._procs.get(name)
            if proc is not None and proc.pid == pid:
                if proc.poll() is None:  # reaps our own children, so no zombie looks alive
                    alive.append(name)
                continue
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            if _zombie(pid):  # exited, but nobody reaped it (PID 1 in some sandboxes)
                continue
            alive.append(name)
        return alive

    # --- lifecycle ----------------------------------------------------------------------

    def up(self, fleet: Path | None = fleet_mod.FLEET_FILE, scale: int = 1) -> None:
        if self.load() and set(self.running()) == set(COMPONENTS) and self.healthy():
            log(f"cluster already running at {self.server} (kubeconfig {self.kubeconfig})")
            return
        if self.pids:
            log("found a partly running cluster; stopping it first")
            self.down(quiet=True)
        started = time.monotonic()
        bins = ensure_binaries()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.ports = {}
        for name in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler"):
            self.ports[name] = free_port(taken=self.ports.values())
        self._make_pki()
        self._write_kubeconfig()
        try:
            self._start_etcd(bins["etcd"])
            self._start_apiserver(bins["kube-apiserver"])
            self._start_controllers(bins)
            self._wait_default_service_account()
            if fleet is not None:
                self.create_fleet(fleet, scale)
        except BaseException:
            log(f"start failed; component logs are in {self.logs}")
            self.down(quiet=True, keep_logs=True)
            raise
        log(f"cluster ready in {time.monotonic() - started:.1f}s: {self.server}")
        log(f"export KUBECONFIG={self.kubeconfig}")

    def down(self, quiet: bool = False, keep_logs: bool = False) -> None:
        """Stops exactly the processes this cluster started (by pid), then removes its state."""
        # The demo's operator (hack/demo.py) records its pid here; stop it before its API server.
        operator_pid = self.state_dir / "operator.pid"
        with contextlib.suppress(OSError, ValueError):  # OSError once the process is gone
            pid = int(operator_pid.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline")  # checked, so a reused pid is left alone
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if b"tessera" in cmdline.read_bytes():
                    os.kill(pid, sig)
                deadline = time.monotonic() + 10
                while b"tessera" in cmdline.read_bytes() and time.monotonic() < deadline:
                    time.sleep(0.1)
        operator_pid.unlink(missing_ok=True)
        if not self.pids and not self.load():
            if not quiet:
                log(f"no cluster recorded in {self.state_dir}; nothing to stop")
            return
        for name in reversed(COMPONENTS):
            pid = self.pids.get(name)
            if pid is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        for name in self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pids[name], signal.SIGKILL)
        self.pids = {}
        for sub in ("etcd", "pki", "kubeconfig", "cluster.json"):
            path = self.state_dir / sub
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if not keep_logs:
            shutil.rmtree(self.logs, ignore_errors=True)
        if not quiet:
            log(f"cluster stopped and its state removed from {self.state_dir}")

    # --- pieces -------------------------------------------------------------------------

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=self.pki)

    def _make_pki(self) -> None:
        """A throwaway CA, an API-server serving cert, an admin client cert, SA keys."""
        self.pki.mkdir(parents=True, exist_ok=True)
        ossl = self._openssl
        ossl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "30",
            "-subj",
            "/CN=tessera-local-ca",
        )
        sans = (
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
            "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
        )
        for name, subj, ext in (
            ("apiserver", "/CN=kube-apiserver", sans),
            ("admin", "/O=system:masters/CN=tessera-admin", "extendedKeyUsage=clientAuth"),
        ):
            ossl(
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                f"{name}.key",
                "-out",
                f"{name}.csr",
                "-subj",
                subj,
            )
            (self.pki / f"{name}.ext").write_text(ext + "\n")
            ossl(
                "x509",
                "-req",
                "-in",
                f"{name}.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                f"{name}.crt",
                "-days",
                "30",
                "-extfile",
                f"{name}.ext",
            )
        ossl("genrsa", "-out", "sa.key", "2048")
        ossl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")

    def _write_kubeconfig(self) -> None:
        import base64

        def b64(name: str) -> str:
            return base64.b64encode((self.pki / name).read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "tessera-local",
                    "cluster": {"server": self.server, "certificate-authority-data": b64("ca.crt")},
                }
            ],
            "users": [
                {
                    "name": "tessera-admin",
                    "user": {
                        "client-certificate-data": b64("admin.crt"),
                        "client-key-data": b64("admin.key"),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "tessera-local",
                    "context": {"cluster": "tessera-local", "user": "tessera-admin"},
                }
            ],
            "current-context": "tessera-local",
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))
        self.kubeconfig.chmod(0o600)

    def _spawn(self, name: str, argv: list[str]) -> None:
        logfile = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            argv,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.state_dir,
        )
        self.pids[name] = proc.pid
        self._procs[name] = proc
        self._save()

    def _wait(self, what: str, check: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n in self.pids if n not in self.running()]
            if dead:
                raise ClusterError(f"{dead[0]} exited; see {self.logs / (dead[0] + '.log')}")
            with contextlib.suppress(Exception):
                if check():
                    return
            time.sleep(0.2)
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}; logs: {self.logs}")

    def _start_etcd(self, binary: Path) -> None:
        client, peer = (
            f"http://127.0.0.1:{self.ports['etcd']}",
            f"http://127.0.0.1:{self.ports['etcd-peer']}",
        )
        self._spawn(
            "etcd",
            [
                str(binary),
                "--name=default",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
                "--quota-backend-bytes=4294967296",
            ],
        )
        self._wait(
            "etcd",
            lambda: (
                b'"health":"true"' in urllib.request.urlopen(f"{client}/health", timeout=2).read()
            ),
        )

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _get(self, path: str) -> tuple[int, bytes]:
        req = urllib.request.Request(self.server + path)
        with urllib.request.urlopen(req, context=self._ssl_context(), timeout=3) as resp:
            return resp.status, resp.read()

    def healthy(self) -> bool:
        try:
            return self._get("/readyz")[0] == 200
        except Exception:
            return False

    def _start_apiserver(self, binary: Path) -> None:
        pki = self.pki
        policy = self.state_dir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        self._spawn(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['apiserver']}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=RBAC",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=100",
                "--audit-log-maxbackup=1",
                # Without kubelets the node-lifecycle controller would be needed only to lift the
                # not-ready taint this plugin adds at creation; kwok keeps the nodes Ready instead.
                "--disable-admission-plugins=TaintNodesByCondition",
            ],
        )
        self._wait("kube-apiserver /readyz", self.healthy, timeout=90)

    def _start_controllers(self, bins: dict[str, Path]) -> None:
        kc, pki = f"--kubeconfig={self.kubeconfig}", self.pki
        self._spawn(
            "kube-controller-manager",
            [
                str(bins["kube-controller-manager"]),
                kc,
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['controller-manager']}",
                f"--controllers={CONTROLLERS}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                "--concurrent-gc-syncs=10",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(bins["kube-scheduler"]),
                kc,
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['scheduler']}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
            ],
        )
        self._spawn(
            "kwok",
            [
                str(bins["kwok"]),
                kc,
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                # No --node-port/--server-address: kwok then serves nothing (no logs/exec).
                "--cidr=10.244.0.0/16",
                "--node-ip=127.0.0.1",
                f"--config={bins['kwok'].parent / 'stages.yaml'}",
                f"--config={HACK / 'kwok' / 'stages.yaml'}",
            ],
        )

    def _wait_default_service_account(self) -> None:
        def ready() -> bool:
            return self._get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200

        self._wait("the default service account", ready, timeout=60)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Runs the pinned kubectl against this cluster."""
        proc = subprocess.run(
            [str(binaries()["kubectl"]), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            text=True,
            capture_output=True,
            check=False,
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def wait_established(self, crds: Iterable[str], timeout: float = 60) -> None:
        wait_established(self.kubectl, crds, timeout)

    def create_fleet(self, fleet: Path = fleet_mod.FLEET_FILE, scale: int = 1) -> int:
        """Creates the fleet's nodes (idempotent) and waits until kwok reports them Ready."""
        from kubernetes import client, config
        from kubernetes.client.rest import ApiException

        nodes = fleet_mod.node_manifests(fleet_mod.load_groups(fleet), scale)
        log(f"creating {len(nodes)} simulated nodes from {fleet.name}")
        api = client.CoreV1Api(config.new_client_from_config(str(self.kubeconfig)))

        def create(node: dict[str, Any]) -> None:
            try:
                api.create_node(node)
            except ApiException as err:
                if err.status != 409:
                    raise

        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(create, nodes))
        names = {n["metadata"]["name"] for n in nodes}
        groups = fleet_mod.load_groups(fleet)
        dra = [*fleet_mod.device_classes(groups), *fleet_mod.resource_slices(groups, scale)]
        if dra:
            # What the DRA drivers of those nodes would publish (kwok runs no driver).
            objects = client.CustomObjectsApi(api.api_client)
            plural = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices"}
            for body in dra:
                try:
                    objects.create_cluster_custom_object(
                        "resource.k8s.io", "v1", plural[body["kind"]], body
                    )
                except ApiException as err:
                    if err.status != 409:
                        raise
            log(f"published {len(dra)} DeviceClasses and ResourceSlices for the DRA nodes")

        def all_ready() -> bool:
            ready = 0
            for node in api.list_node(label_selector=fleet_mod.FLEET_LABEL).items:
                conds = {c.type: c.status for c in node.status.conditions or []}
                ready += node.metadata.name in names and conds.get("Ready") == "True"
            return ready == len(names)

        self._wait(f"{len(nodes)} nodes Ready", all_ready, timeout=60 + len(nodes) / 20)
        return len(nodes)


@contextlib.contextmanager
def terminated_as_exit() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so a script that started a cluster always stops it."""
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Local Kubernetes control plane with a kwok fleet."
    )
    parser.add_argument("command", choices=["up", "down", "status", "fleet"])
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("TESSERA_STATE_DIR", REPO / ".tessera")),
    )
    parser.add_argument("--fleet", type=Path, default=fleet_mod.FLEET_FILE, help="fleet file")
    parser.add_argument("--scale", type=int, default=1, help="multiply every fleet group's count")
    parser.add_argument("--no-fleet", action="store_true", help="start without simulated nodes")
    args = parser.parse_args(argv)
    cluster = Cluster(args.state_dir.resolve())
    try:
        if args.command == "up":
            cluster.up(None if args.no_fleet else args.fleet, args.scale)
        elif args.command == "down":
            cluster.down()
        elif args.command == "fleet":
            if not cluster.load():
                raise ClusterError("no cluster is running; run `make cluster-up` first")
            cluster.create_fleet(args.fleet, args.scale)
        else:
            if not cluster.load():
                print("no cluster")
                return 1
            status = {
                "server": cluster.server,
                "running": cluster.running(),
                "healthy": cluster.healthy(),
                "kubeconfig": str(cluster.kubeconfig),
            }
            print(json.dumps(status))
    except (ClusterError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
