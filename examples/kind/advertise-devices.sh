#!/usr/bin/env bash
# Gives the kind cluster's GPU-labelled workers the device-plugin capacity that real GPU
# nodes report (8 devices each), the way Kubernetes documents advertising extended
# resources: a patch of the node's status. Run it once after `kind create cluster`; the
# kubelet keeps the capacity, and derives allocatable from it.
set -euo pipefail

advertise() {  # <label selector> <resource> <count>
    local selector=$1 resource=$2 count=$3 node
    for node in $(kubectl get nodes -l "$selector" -o name); do
        kubectl patch "$node" --subresource=status --type=json \
            -p "[{\"op\": \"add\", \"path\": \"/status/capacity/${resource//\//~1}\", \"value\": \"$count\"}]"
    done
}

advertise nvidia.com/gpu.present=true nvidia.com/gpu 8
advertise amd.com/gpu.product-name amd.com/gpu 8
kubectl get nodes -o custom-columns='NODE:.metadata.name,NVIDIA:.status.allocatable.nvidia\.com/gpu,AMD:.status.allocatable.amd\.com/gpu'
