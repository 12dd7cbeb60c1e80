#!/usr/bin/env bash
# Shared set-up for devtools/test.sh and devtools/run.sh: installs the Debian
# packages the build and tests need (when missing), reserves hugepages when
# running as root, then configures and builds in build/ (or $SHUNT_BUILD_DIR).
# Sourced, not run.

shunt_packages=(
  meson ninja-build pkg-config g++ cmake
  libdpdk-dev libhwloc-dev hwloc libnuma-dev
  libibverbs-dev rdma-core
  libgtest-dev libgmock-dev libbenchmark-dev
  libfabric-dev libfabric-bin openmpi-bin libopenmpi-dev
  valgrind iproute2 procps util-linux
  go-md2man man-db dpdk dpdk-dev
)

shunt_log() { printf '== %s\n' "$*" >&2; }

shunt_install_packages() {
  local missing=()
  local p
  for p in "${shunt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  shunt_log "installing: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    shunt_log "not root: cannot install packages; install them and re-run"
    return 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# Reserve hugepages (as root) so the hugepage paths are exercised; everything
# also works without them.
shunt_reserve_hugepages() {
  local want=${SHUNT_TEST_HUGEPAGES:-256}
  [ "$(id -u)" -eq 0 ] || { shunt_log "not root: not reserving hugepages"; return 0; }
  local have
  have=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
  if [ "$have" -lt "$want" ]; then
    sysctl -q vm.nr_hugepages="$want" 2>/dev/null || shunt_log "could not reserve hugepages"
  fi
  if ! grep -q ' hugetlbfs ' /proc/mounts; then
    mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null ||
      shunt_log "could not mount hugetlbfs (segments use /dev/shm)"
  fi
  shunt_log "hugepages: $(awk '/HugePages_Free/ {print $2}' /proc/meminfo) free"
}

# shunt_build DIR [meson options...]
shunt_build() {
  local dir=$1
  shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  else
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  fi
  # The configure summary: meson indents its section titles ("  Shunt").
  sed -n '/^ *Shunt$/,$p' "$dir.setup.log" | sed '/^Found ninja/d' >&2
  # Build progress on stderr: a line each time another tenth of the steps
  # is done (a first build takes minutes), the full log in $dir.ninja.log.
  shunt_log "building in $dir (log: $dir.ninja.log)"
  NINJA_STATUS='[%f/%t] ' ninja -C "$dir" 2>&1 | tee "$dir.ninja.log" | awk '
    match($0, /^\[[0-9]+\/[0-9]+\]/) {
      split(substr($0, 2, RLENGTH - 2), n, "/")
      tenth = int(10 * n[1] / n[2])
      if (tenth > last) { printf "== build %d%% (%d/%d steps)\n", 10 * tenth, n[1], n[2] > "/dev/stderr"; last = tenth }
    }'
  [ "${PIPESTATUS[0]}" -eq 0 ] || { tail -n 60 "$dir.ninja.log" >&2; return 1; }
  grep -E 'warning:' "$dir.ninja.log" | sort -u | head -20 >&2 || true
}
