"""Pod creates and the visits' status writes sent on an event loop of their own, over aiohttp.
A burst's thousands of POSTs are most of the operator's writes; through urllib3 on 32
threads each cost the operator 0.70-0.73 ms of CPU, on one loop 0.41-0.62 ms (1,000 pinned
pods over TLS, three runs each), and a thread blocked on the loop saves nothing (0.65-0.81
ms): the senders are coroutines. A Workload's status patch likewise: 0.65-0.82 ms from 32
threads, 0.42-0.55 ms on the loop (400 patches, four runs each). tessera.k8s makes each
request (URL, credentials, a refreshed token) and translates its errors; this module only
sends."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import aiohttp

from tessera.errors import Conflict
from tessera.k8s import USER_AGENT, Kube, Request, api_error

T = TypeVar("T")

TIMEOUT = 30.0  # seconds for one request, as tessera.k8s's writes


class AsyncKube:
    """One event loop on a thread of its own and the aiohttp session it sends through: at
    most `connections` pod creates at a time, and as many status writes beside them (a
    burst's pods do not wait behind the statuses of the Workloads that run, nor these
    behind the pods)."""

    def __init__(self, kube: Kube, connections: int) -> None:
        self._kube = kube
        self._pods = asyncio.Semaphore(connections)
        self._statuses = asyncio.Semaphore(connections)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tessera-send", daemon=True
        )
        self._thread.start()
        context, self._server_name = kube.tls()
        self._session = self.run(self._open(context, 2 * connections))

    @staticmethod
    async def _open(context: ssl.SSLContext, connections: int) -> aiohttp.ClientSession:
        """The session, made on the loop it sends on."""
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=connections),
            timeout=aiohttp.ClientTimeout(total=TIMEOUT),
            headers={"User-Agent": USER_AGENT},  # as the API server's audit log names us
        )

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Runs a coroutine on the loop; its future says when it is done."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs a coroutine on the loop and waits for its result (from any other thread)."""
        return self.submit(coro).result()

    def close(self) -> None:
        """Closes the session and stops the loop; what is in flight is cut off."""
        if self._loop.is_closed():
            return
        self.run(self._session.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def create_pod(self, pod: dict[str, Any]) -> bool:
        """Creates a pod; False when it already exists (deterministic names make this safe)."""
        try:
            async with self._pods:
                await self._send(self._kube.pod_create(pod))
        except Conflict:
            return False
        return True

    async def write_status(self, request: Request) -> None:
        """Sends a Workload's status patch (tessera.k8s.Kube.workload_status_patch)."""
        async with self._statuses:
            await self._send(request)

    async def _send(self, request: Request) -> None:
        """Sends a request whose answer is not needed (read off the connection, not
        decoded); raises the Tessera error for an error answer or an unreachable server."""
        try:
            async with self._session.request(
                request.method,
                request.url,
                data=request.body,
                headers=request.headers,
                server_hostname=self._server_name,
                proxy=self._kube.proxy,
            ) as resp:
                answer = await resp.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise self._kube.unreachable(err) from err
        if resp.status >= 400:
            raise api_error(resp.status, resp.reason or "", answer)
