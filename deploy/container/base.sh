#!/usr/bin/env bash
# Makes the runtime base image of Containerfile.host, localhost/hookline-runtime-base:bookworm, from Debian's
# packages alone (this machine reaches no image registry): a distroless-like root filesystem, the counterpart of
# Containerfile's gcr.io/distroless/cc-debian12:nonroot, with
#   - the files of libc6, libgcc-s1 (what the binaries link against: `ldd`), base-files (os-release), netbase
#     (/etc/services, /etc/protocols) and the CA bundle of ca-certificates, at their security-updated versions;
#   - /etc/passwd and /etc/group with root, nobody and nonroot (65532:65532, home /home/nonroot), /tmp (1777);
#   - each package's dpkg status in /var/lib/dpkg/status.d/ (as distroless has it), so image scanners see them;
#   - no shell, no package manager, no coreutils: nothing in the images runs a shell.
# Cached outside the repository (HOOKLINE_CACHE, default /var/cache/hookline) so a CI run does not redo it:
#   container/debootstrap-bookworm/     debootstrap --variant=minbase, then apt-get upgrade from the security suite
#   container/runtime-base-bookworm-RECIPE.tar  the assembled root filesystem, imported with `podman import`
# Each step is skipped when its result exists. RECIPE is a digest of this script, also a label of the image: a
# change here makes a new root filesystem and image by itself. HOOKLINE_REBUILD_BASE=1 redoes everything, the
# debootstrap too (for a new Debian point release or security update). Installs debootstrap and podman from
# Debian's packages when missing.
# Usage: bash deploy/container/base.sh      (prints the image name on its last line)
set -euo pipefail

suite=bookworm
cache=${HOOKLINE_CACHE:-/var/cache/hookline}/container
debroot=$cache/debootstrap-$suite
recipe=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
basetar=$cache/runtime-base-$suite-$recipe.tar
image=localhost/hookline-runtime-base:$suite
# What debootstrap installs besides the minimal base (its marker records it: another list redoes it).
include=ca-certificates,netbase
# The packages whose files make the runtime (ca-certificates: only its generated bundle, see below).
packages=(base-files libc6 libgcc-s1 netbase)

log() { echo "base.sh: $*" >&2; }

if [ "$(id -u)" -eq 0 ]; then SUDO=(); elif command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else SUDO=(); fi
missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian's ${missing[*]}"
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
PATH=$PATH:/usr/sbin:/sbin

if [ "${HOOKLINE_REBUILD_BASE:-0}" = 1 ]; then
  log "HOOKLINE_REBUILD_BASE=1: removing the cached base"
  podman image rm -f "$image" >/dev/null 2>&1 || true
  rm -rf "$debroot" "$cache"/runtime-base-"$suite"-*.tar
fi
if podman image exists "$image" &&
  [ "$(podman image inspect --format '{{index .Labels "io.hookline.base-recipe"}}' "$image")" = "$recipe" ]; then
  log "$image exists (recipe $recipe)"
  echo "$image"
  exit 0
fi
mkdir -p "$cache"

# Debian's mirrors as this machine's apt knows them (never a host written here): the main suite and its security
# suite.
mirror_of() {
  # shellcheck disable=SC2016 # $(REPO_URI) is apt's format field, not a shell expansion
  apt-get indextargets --format '$(REPO_URI)' 'Identifier: Packages' 'Origin: Debian' "Release: $1" | sort -u | head -n 1
}

if [ "$(cat "$debroot/.hookline-complete" 2>/dev/null)" != "$include" ]; then
  main_uri=$(mirror_of "$suite")
  [ -n "$main_uri" ] || { "${SUDO[@]}" apt-get update -qq; main_uri=$(mirror_of "$suite"); }
  [ -n "$main_uri" ] || { log "apt knows no Debian $suite mirror (apt-get indextargets)"; exit 1; }
  security_uri=$(mirror_of "$suite-security")
  rm -rf "$debroot"
  log "debootstrap --variant=minbase $suite from $main_uri (once; cached in $debroot)"
  debootstrap --variant=minbase --include="$include" "$suite" "$debroot" "$main_uri" >"$cache/debootstrap.log" 2>&1 ||
    { tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
  # Security updates of what the runtime takes (libc6 above all): the minbase is the point release.
  {
    echo "deb $main_uri $suite main"
    echo "deb $main_uri $suite-updates main"
    [ -z "$security_uri" ] || echo "deb $security_uri $suite-security main"
  } >"$debroot/etc/apt/sources.list"
  cp /etc/resolv.conf "$debroot/etc/resolv.conf"
  log "apt-get upgrade in the debootstrap root"
  chroot "$debroot" env DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    sh -c 'apt-get update -qq && apt-get upgrade -y -qq && apt-get clean' >"$cache/upgrade.log" 2>&1 ||
    { tail -n 20 "$cache/upgrade.log" >&2; exit 1; }
  echo "$include" >"$debroot/.hookline-complete"
fi

if [ ! -f "$basetar" ]; then
  log "assembling the runtime root filesystem from ${packages[*]} and the CA bundle"
  out=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$out"' EXIT
  chmod 755 "$out"
  # Merged /usr: /bin, /lib, /lib64 and /sbin are symlinks into /usr, as in the debootstrap root.
  for l in bin lib lib64 sbin; do
    if [ -L "$debroot/$l" ]; then cp -a "$debroot/$l" "$out/$l"; fi
  done
  mkdir -p "$out/var/lib/dpkg/status.d"
  for pkg in "${packages[@]}"; do
    list=""
    for candidate in "$debroot/var/lib/dpkg/info/$pkg.list" "$debroot/var/lib/dpkg/info/$pkg":*.list; do
      if [ -f "$candidate" ]; then list=$candidate; break; fi
    done
    [ -n "$list" ] || { log "package $pkg is not in the debootstrap root"; exit 1; }
    while IFS= read -r path; do
      src=$debroot$path
      # Directories are made as their files need them; a listed path may go through a merged-/usr symlink, so
      # its directory is resolved and the file itself copied as it is (a symlink stays a symlink).
      if [ -d "$src" ] && [ ! -L "$src" ]; then continue; fi
      [ -e "$src" ] || [ -L "$src" ] || continue
      dir=$(readlink -f "$(dirname "$src")")
      rel=${dir#"$debroot"}
      mkdir -p "$out$rel"
      cp -a --no-dereference "$src" "$out$rel/"
    done <"$list"
    chroot "$debroot" dpkg-query -s "$pkg" >"$out/var/lib/dpkg/status.d/$pkg"
  done
  # TLS roots: the bundle update-ca-certificates generated (the package's scripts are not wanted).
  mkdir -p "$out/etc/ssl/certs"
  cp -L "$debroot/etc/ssl/certs/ca-certificates.crt" "$out/etc/ssl/certs/ca-certificates.crt"
  mkdir -p "$out/usr/share/doc/ca-certificates"
  cp "$debroot/usr/share/doc/ca-certificates/copyright" "$out/usr/share/doc/ca-certificates/"
  chroot "$debroot" dpkg-query -s ca-certificates >"$out/var/lib/dpkg/status.d/ca-certificates"
  # The accounts distroless has: the images run as nonroot (65532).
  mkdir -p "$out/etc" "$out/home/nonroot" "$out/tmp" "$out/root"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$out/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$out/etc/group"
  chown 65532:65532 "$out/home/nonroot"
  chmod 1777 "$out/tmp"
  chmod 700 "$out/root"
  # base-files' login banner scripts: nothing logs in here, and they would need a shell.
  rm -rf "$out/etc/update-motd.d"
  for shell in bin/sh bin/bash bin/dash usr/bin/sh usr/bin/bash usr/bin/dash; do
    if [ -e "$out/$shell" ]; then log "a shell ($shell) got into the runtime root"; exit 1; fi
  done
  tar -C "$out" --numeric-owner --sort=name --mtime=@0 -cf "$basetar.tmp" .
  rm -f "$cache"/runtime-base-"$suite"-*.tar
  mv "$basetar.tmp" "$basetar"
  rm -rf "$out"
  trap - EXIT
fi

log "podman import $basetar as $image"
old_id=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
podman import --quiet \
  --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "LABEL io.hookline.base-recipe=$recipe" \
  "$basetar" "$image" >/dev/null
# The image this one replaces (an older recipe): removed unless an image built on it still holds it.
if [ -n "$old_id" ]; then podman image rm "$old_id" >/dev/null 2>&1 || true; fi
echo "$image"
