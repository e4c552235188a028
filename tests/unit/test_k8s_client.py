"""The connection pool the operator's client sends through (tessera.k8s.Kube): its retries
and size are what the code says, on the pool manager the Kubernetes client built."""

from __future__ import annotations

import pytest
from kubernetes import client

from tessera.k8s import Kube

pytestmark = pytest.mark.unit


def test_requests_go_through_a_pool_with_the_operators_retries_and_size() -> None:
    config = client.Configuration()
    config.host = "https://127.0.0.1:6443"
    kube = Kube(client.ApiClient(config))
    pool = kube.api_client.rest_client.pool_manager.connection_from_url(config.host)
    assert pool.retries == 2  # not urllib3's default of 3
    assert pool.pool is not None and pool.pool.maxsize == 64
