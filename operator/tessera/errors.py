"""Tessera's error hierarchy: one place, one line of docstring each.
Foreign errors (ApiException, ValidationError) are translated into these at the boundary."""

from __future__ import annotations


class TesseraError(Exception):
    """Base of every error Tessera raises on purpose."""


class ClusterUnreachable(TesseraError):
    """The Kubernetes API server cannot be reached or refuses our credentials."""


class CRDsMissing(TesseraError):
    """Tessera's CustomResourceDefinitions are not installed in the cluster."""


class ApiError(TesseraError):
    """The API server answered a request with an error."""

    TRANSIENT = frozenset({408, 429})  # 4xx answers that say "later", not "no"

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message

    @property
    def refusal(self) -> bool:
        """The request as such was refused (a quota, admission, validation), rather than
        failed for now (5xx, a timeout, too many requests)."""
        return 400 <= self.status < 500 and self.status not in self.TRANSIENT


class NotFound(ApiError):
    """The object does not exist (any more)."""


class Conflict(ApiError):
    """The object already exists, or changed since it was read."""


class Gone(ApiError):
    """A watch or list asked for a resourceVersion the server no longer keeps: list again."""
