#!/usr/bin/env bash
# Checks the container side of the deployment (docs/deployment.md):
#   1. hookline-healthcheck's unit tests (rustc --test deploy/container/healthcheck.rs);
#   2. compose.yaml, the Containerfiles and the compose configuration agree (check-compose.py), and compose.yaml
#      is valid for an independent implementation (Debian's docker-compose, `config -q`);
#   3. the images built from this host's binaries (build.sh, Containerfile.host; the runtime base is cached under
#      /var/cache/hookline) and smoke-tested in chroots of their filesystems (smoke.sh).
# Installs Debian's python3-yaml and docker-compose when missing (podman and debootstrap: base.sh).
# BIN_DIR: the binaries to package (deploy/test.sh passes target/debug, which it has just built); without it,
# build.sh builds the release binaries.
# Usage: bash deploy/container/check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

missing=()
/usr/bin/python3 -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "container/check.sh: installing Debian's ${missing[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=(); elif command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "container/check.sh: not root and no sudo: install ${missing[*]}" >&2; exit 1; fi
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== hookline-healthcheck unit tests"
rustc --edition 2021 --test -o "$tmp/healthcheck-tests" deploy/container/healthcheck.rs
"$tmp/healthcheck-tests" >"$tmp/healthcheck-tests.log" 2>&1 || { cat "$tmp/healthcheck-tests.log" >&2; exit 1; }
grep -E '^test result' "$tmp/healthcheck-tests.log" | sed 's/^/  /'

echo "== compose.yaml against the images and the configuration (check-compose.py)"
/usr/bin/python3 deploy/container/check-compose.py | sed 's/^/  /'
# docker-compose 1.x predates the Compose Specification's top-level `name`: it reads a copy without it, with
# relative paths resolved from deploy/container as for the file itself.
grep -v '^name:' deploy/container/compose.yaml >"$tmp/compose.yaml"
docker-compose -f "$tmp/compose.yaml" --project-directory deploy/container config -q
echo "  docker-compose $(docker-compose version --short): compose.yaml is valid"

echo "== images from this host's binaries (build.sh)"
tag=check-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
trap 'rm -rf "$tmp"
  podman image rm localhost/hookline-edge:'"$tag"' localhost/hookline-worker:'"$tag"' localhost/hookline:'"$tag"' >/dev/null 2>&1 || true' EXIT
bash deploy/container/build.sh "$tag" 2>&1 | sed 's/^/  /'

echo "== smoke test of the images (smoke.sh)"
bash deploy/container/smoke.sh "$tag" 2>&1 | sed 's/^/  /'
