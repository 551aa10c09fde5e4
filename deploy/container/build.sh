#!/usr/bin/env bash
# Builds hookline's three images from binaries built on this host (Containerfile.host), for a machine that reaches
# no image registry:
#   localhost/hookline-edge:TAG   localhost/hookline-worker:TAG   localhost/hookline:TAG
# The binaries: BIN_DIR's hookline-edge, hookline-worker and hookline when BIN_DIR is given (deploy/test.sh passes
# the debug ones it has just built), else `cargo build --release --locked` of the three service packages (as
# deploy/up.sh; nothing to do when they are up to date) and $CARGO_TARGET_DIR/release. hookline-healthcheck (the
# images' HEALTHCHECK probe) is compiled from deploy/container/healthcheck.rs with rustc. The runtime base comes
# from deploy/container/base.sh (cached). Images are built with `--format docker` so that they keep HEALTHCHECK.
# Usage: deploy/container/build.sh [TAG]   (default latest)
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-latest}

if [ -z "${BIN_DIR:-}" ]; then
  cargo build --release --locked -p hookline-edge -p hookline-worker -p hookline-cli
  BIN_DIR=${CARGO_TARGET_DIR:-target}/release
fi
for bin in hookline-edge hookline-worker hookline; do
  [ -x "$BIN_DIR/$bin" ] || { echo "build.sh: $BIN_DIR/$bin missing (cargo build -p hookline-edge -p hookline-worker -p hookline-cli)" >&2; exit 1; }
done

base=$(bash deploy/container/base.sh | tail -n 1)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/bin"
cp --reflink=auto "$BIN_DIR/hookline-edge" "$BIN_DIR/hookline-worker" "$BIN_DIR/hookline" "$stage/bin/"
rustc --edition 2021 -C opt-level=s -C strip=symbols -C panic=abort \
  -o "$stage/bin/hookline-healthcheck" deploy/container/healthcheck.rs
chmod 0755 "$stage"/bin/*

for target in edge worker hookline; do
  case $target in
    edge) name=hookline-edge ;;
    worker) name=hookline-worker ;;
    hookline) name=hookline ;;
  esac
  start=$(date +%s)
  old_id=$(podman image inspect --format '{{.Id}}' "localhost/$name:$tag" 2>/dev/null || true)
  # No layer cache: the binaries change with every build, and cached stages would pile up as unnamed images.
  podman build --quiet --format docker --layers=false \
    -f deploy/container/Containerfile.host --build-arg "RUNTIME_BASE=$base" --target "$target" \
    --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    --label "org.opencontainers.image.version=$tag" \
    -t "localhost/$name:$tag" "$stage" >/dev/null
  new_id=$(podman image inspect --format '{{.Id}}' "localhost/$name:$tag")
  if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then podman image rm "$old_id" >/dev/null 2>&1 || true; fi
  echo "build.sh: localhost/$name:$tag ($(podman image inspect --format '{{.Size}}' "localhost/$name:$tag" | awk '{printf "%.0f MB", $1/1e6}'), $(( $(date +%s) - start )) s)"
done
