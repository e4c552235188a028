"""hack/cluster.py's ports: free, distinct, and never from the kernel's ephemeral range,
which outgoing connections draw from while the components start."""

from __future__ import annotations

import socket

import pytest

import cluster  # hack/cluster.py: tests/conftest.py puts hack/ on the path


def test_ports_are_below_the_ephemeral_range_and_free() -> None:
    low = int(cluster.EPHEMERAL_RANGE.read_text().split()[0])
    ports = [cluster.free_port() for _ in range(50)]
    assert all(cluster.LOWEST_PORT <= p < low for p in ports)
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # nothing listens there


def test_a_port_taken_or_listened_on_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        listening = busy.getsockname()[1]
        # Only three candidates: the one listened on, one already taken, and a free one.
        free = cluster.free_port()
        candidates = iter([listening, 20000, free])
        monkeypatch.setattr(cluster.random, "randrange", lambda *_: next(candidates))
        assert cluster.free_port(taken={20000}) == free


def test_no_free_port_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setattr(cluster.random, "randrange", lambda *_: port)
        with pytest.raises(cluster.ClusterError, match="no free port"):
            cluster.free_port()
