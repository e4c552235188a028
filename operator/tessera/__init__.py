"""Tessera: places accelerator workloads on the best pool of a mixed fleet.
The package root holds only the version; each layer lives in its own module."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tessera-operator")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0"
