# Shared settings for the hack/ scripts: versions, cache locations, logging.
# Sourced, not executed.
HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HACK_DIR}/.." && pwd)"
# shellcheck source=versions.env
source "${HACK_DIR}/versions.env"

# Built binaries live outside the repo, one folder per component and version, so a warm
# run skips the build and a version bump rebuilds only what changed.
TESSERA_CACHE="${TESSERA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}"
K8S_BIN="${TESSERA_CACHE}/bin/kubernetes-${KUBERNETES_VERSION}"
ETCD_BIN="${TESSERA_CACHE}/bin/etcd-${ETCD_VERSION}"
KWOK_BIN="${TESSERA_CACHE}/bin/kwok-${KWOK_VERSION}"
HELM_BIN="${TESSERA_CACHE}/bin/helm-${HELM_VERSION}"
PROMETHEUS_BIN="${TESSERA_CACHE}/bin/prometheus-${PROMETHEUS_VERSION}"
# Where `make cluster-up` keeps its state, kubeconfig and logs (git-ignored).
STATE_DIR="${TESSERA_STATE_DIR:-${REPO_ROOT}/.tessera}"

log() { printf '\033[1m==>\033[0m %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
