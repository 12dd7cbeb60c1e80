#!/usr/bin/env bash
# The main job: the same set-up as devtools/test.sh (packages, hugepages,
# build), then shows what Shunt sees on this machine with shunt-info.
set -euo pipefail
cd "$(dirname "$0")/.."
. devtools/setup.sh
shunt_install_packages
shunt_reserve_hugepages
shunt_build build
build/app/shunt-info "$@"
