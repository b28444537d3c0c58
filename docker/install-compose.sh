#!/usr/bin/env bash
# Makes `docker compose` (the v2 spelling) work. Idempotent: does nothing if it already works.
#
# Bookworm has only Compose 1.29.2 (Python, `docker-compose`), and no registry is reachable to fetch
# Docker's release binary. Debian trixie packages Compose v2 as a static Go binary (libc6 >= 2.34
# only), so we fetch that .deb through apt with a private package list (signature-checked by the
# Debian archive keyring; the host's sources and dpkg database stay untouched) and install only the
# CLI plugin. If that fails, fall back to a shim plugin that forwards to docker-compose 1.29.2.
#
# Usage: docker/install-compose.sh [--shim]     --shim  install the 1.29.2 shim instead
# Env: PLUGIN_DIR (default /usr/local/lib/docker/cli-plugins, a docker CLI search path for all users)
set -euo pipefail

plugin_dir=${PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [[ ${1:-} != --shim ]] && docker compose version >/dev/null 2>&1; then
  docker compose version
  exit 0
fi
mkdir -p "$plugin_dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

install_debian_v2() {
  local st=$tmp o deb
  mkdir -p "$st/lists/partial" "$st/x"
  echo "deb $mirror trixie main" >"$st/sources.list"
  o=(-o "Dir::Etc::sourcelist=$st/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$st/lists"
     -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root -q)
  apt-get "${o[@]}" update >/dev/null
  (cd "$st" && apt-get "${o[@]}" download docker-compose >/dev/null)
  deb=$(ls "$st"/docker-compose_2.*.deb) || { echo "trixie's docker-compose is not v2" >&2; return 1; }
  dpkg-deb -x "$deb" "$st/x"
  install -m 0755 "$st/x/usr/libexec/docker/cli-plugins/docker-compose" "$plugin_dir/docker-compose"
  echo "== installed Compose v2 from $(basename "$deb") into $plugin_dir"
}

install_shim() {
  command -v docker-compose >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-compose >/dev/null; }
  # A docker CLI plugin answers `docker-cli-plugin-metadata`; otherwise the CLI calls it as
  # `docker-compose compose ARGS...`, so drop that first word and hand the rest to 1.29.2.
  cat >"$plugin_dir/docker-compose" <<'EOF'
#!/bin/sh
# docker CLI plugin shim: `docker compose ...` -> Compose 1.29.2 (`docker-compose ...`).
if [ "$1" = docker-cli-plugin-metadata ]; then
  printf '{"SchemaVersion":"0.1.0","Vendor":"fgpu (shim)","Version":"%s","ShortDescription":"Docker Compose 1.29 via shim"}\n' \
    "$(docker-compose version --short 2>/dev/null || echo 1.29)"
  exit 0
fi
[ "$1" = compose ] && shift
exec docker-compose "$@"
EOF
  chmod 0755 "$plugin_dir/docker-compose"
  echo "== installed the docker-compose 1.29 shim into $plugin_dir"
}

if [[ ${1:-} == --shim ]]; then
  install_shim
elif ! install_debian_v2; then
  echo "== Compose v2 from Debian failed; using the shim" >&2
  install_shim
fi
docker compose version
