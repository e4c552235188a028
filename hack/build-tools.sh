#!/usr/bin/env bash
# Builds the pinned control-plane binaries from source through the Go module proxy into
# the cache (see hack/lib.sh), skipping every component already built at its version.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

command -v go >/dev/null || die "Go is required to build the control plane (https://go.dev/dl/)"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0
# -mod=readonly: the committed go.sum files pin every module, so the build never edits them.
TAGS="selinux,notest"

# build DEST MODULE_DIR LDFLAGS PACKAGE...: one `go build` per component so the compiler
# shares work across packages; writes into a temp dir and renames, so a cut build never
# looks finished.
build() {
  local dest="$1" moddir="$2" ldflags="$3"; shift 3
  local names=() pkg
  for pkg in "$@"; do names+=("$(basename "$pkg")"); done
  if [[ -d "$dest" ]]; then
    log "cached: $(basename "$dest") (${names[*]}) in ${dest}"
    return
  fi
  log "building $(basename "$dest"): ${names[*]} (cold builds take minutes)"
  local start=$SECONDS tmp="${dest}.tmp.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  (cd "${HACK_DIR}/tools/${moddir}" && go build -tags "$TAGS" -ldflags "-s -w ${ldflags}" -o "$tmp/" "$@")
  mv "$tmp" "$dest"
  log "built $(basename "$dest") in $((SECONDS - start))s"
}

k8s_minor="${KUBERNETES_VERSION#v1.}"; k8s_minor="${k8s_minor%%.*}"
k8s_ld=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ld+=" -X ${pkg}.gitVersion=${KUBERNETES_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${k8s_minor}"
  k8s_ld+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
done
helm_ld="-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  helm_ld+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${k8s_minor}"
done

mkdir -p "${TESSERA_CACHE}/bin"
start=$SECONDS
build "$K8S_BIN" kubernetes "$k8s_ld" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
build "$ETCD_BIN" kubernetes "" tessera.dev/hack/tools/kubernetes/etcd
build "$KWOK_BIN" kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" sigs.k8s.io/kwok/cmd/kwok
# kwok ships no built-in stages: take upstream's node and pod stages from the pinned module
# and keep them beside the binary: nodes made Ready, bound pods Running, Job pods
# Succeeded, deleted pods finalised. Node status is re-sent every 10 minutes (the stage
# upstream pairs with node Leases), not every 20-25 s as in its "fast" heartbeat: no node
# lifecycle controller runs here (hack/cluster.py CONTROLLERS), so nothing reads a
# heartbeat, and at 5,000 nodes those 223 status PATCHes a second kept 1.8 of the
# machine's 2 CPUs busy (API server, kwok, etcd) before any workload. The file's first
# line names the stages, so a cache written with another list is written again.
kwok_stages=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml)
stages_header="# kwok stages: ${kwok_stages[*]}"
if [[ "$(head -n 1 "${KWOK_BIN}/stages.yaml" 2>/dev/null)" != "$stages_header" ]]; then
  kwok_src="$(cd "${HACK_DIR}/tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  {
    echo "$stages_header"
    for f in "${kwok_stages[@]}"; do
      cat "${kwok_src}/kustomize/stage/${f}"; echo "---"
    done
  } > "${KWOK_BIN}/stages.yaml.tmp"
  mv "${KWOK_BIN}/stages.yaml.tmp" "${KWOK_BIN}/stages.yaml"
  log "kwok stages written to ${KWOK_BIN}/stages.yaml"
fi
build "$HELM_BIN" helm "$helm_ld" helm.sh/helm/v3/cmd/helm
# Prometheus' own go.mod has one replace directive (fsnotify), which hack/tools/prometheus
# repeats, since a dependency's replaces do not apply. Without the builtinassets tag the
# web UI is left out; the tests only use the HTTP API.
prom_ld=""
for v in Version=${PROMETHEUS_VERSION#v} Branch=HEAD Revision=unknown; do
  prom_ld+=" -X github.com/prometheus/common/version.${v}"
done
build "$PROMETHEUS_BIN" prometheus "$prom_ld" \
  github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
log "tools ready in $((SECONDS - start))s: ${TESSERA_CACHE}/bin"
