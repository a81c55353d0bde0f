#!/usr/bin/env bash
# Installs the Debian 12 packages GraphTensor builds with (the CUDA Toolkit, if wanted, comes
# from NVIDIA and is found at /usr/local/cuda). Uses sudo when not run as root.
set -euo pipefail
# libcli11-dev (option parsing) and nlohmann-json3-dev (JSON) for the programs, libcpp-httplib-dev for
# gt-serve's HTTP, curl for the HTTP API's tests and the examples of docs/serving.md.
pkgs=(cmake g++ make pkg-config libtbb-dev libhdf5-dev libyaml-cpp-dev libgtest-dev libopenblas-dev zlib1g-dev
      libcli11-dev nlohmann-json3-dev libcpp-httplib-dev curl)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${missing[@]}"
