#!/usr/bin/env bash
# Installs hookline as systemd services (docs/deployment.md):
#   /usr/local/bin/    hookline-edge, hookline-worker, hookline, and hookline-healthcheck (the units' readiness
#                      probe, compiled from deploy/container/healthcheck.rs with rustc)
#   /etc/systemd/system/  hookline-{migrate,edge,worker,console,sandbox}.service, hookline.target, and the
#                      high-availability units hookline-{etcd,patroni,haproxy}.service (docs/scaling.md; their
#                      programs come from Debian's etcd-server, patroni and haproxy, their configuration from
#                      /etc/hookline/{etcd.env,patroni.yml,haproxy.cfg}: examples in deploy/systemd/ha/)
#   /etc/hookline/hookline.toml  CONFIG (mode 0600, root), only when there is none: an existing configuration is
#                      never replaced. Secrets named "env:NAME" in it go to /etc/hookline/hookline.env (0600).
# The binaries: BIN_DIR's when BIN_DIR is given, else `cargo build --release --locked` of the three service
# packages and $CARGO_TARGET_DIR/release. DESTDIR installs under another root (deploy/systemd/check.sh does), and
# then nothing is reloaded. Nothing is enabled or started: the script prints the commands for that.
# Usage: [BIN_DIR=…] [DESTDIR=…] deploy/systemd/install.sh [CONFIG]
set -euo pipefail
cd "$(dirname "$0")/../.."
config=${1:-}
dest=${DESTDIR:-}

if [ -z "${BIN_DIR:-}" ]; then
  cargo build --release --locked -p hookline-edge -p hookline-worker -p hookline-cli
  BIN_DIR=${CARGO_TARGET_DIR:-target}/release
fi
for bin in hookline-edge hookline-worker hookline; do
  [ -x "$BIN_DIR/$bin" ] || { echo "install.sh: $BIN_DIR/$bin missing" >&2; exit 1; }
done

install -d -m 0755 "$dest/usr/local/bin" "$dest/etc/systemd/system"
install -m 0755 "$BIN_DIR/hookline-edge" "$BIN_DIR/hookline-worker" "$BIN_DIR/hookline" "$dest/usr/local/bin/"
probe=$(mktemp)
trap 'rm -f "$probe"' EXIT
rustc --edition 2021 -C opt-level=s -C strip=symbols -C panic=abort -o "$probe" deploy/container/healthcheck.rs
install -m 0755 "$probe" "$dest/usr/local/bin/hookline-healthcheck"
install -m 0644 deploy/systemd/hookline-*.service deploy/systemd/hookline.target "$dest/etc/systemd/system/"

install -d -m 0755 "$dest/etc/hookline"
if [ -e "$dest/etc/hookline/hookline.toml" ]; then
  echo "install.sh: keeping the existing $dest/etc/hookline/hookline.toml"
elif [ -n "$config" ]; then
  install -m 0600 "$config" "$dest/etc/hookline/hookline.toml"
  echo "install.sh: installed $config as $dest/etc/hookline/hookline.toml (mode 0600)"
else
  echo "install.sh: no configuration yet: write $dest/etc/hookline/hookline.toml (mode 0600; deploy/hookline.toml is an example)"
fi

if [ -z "$dest" ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
cat <<'EOF'
install.sh: installed. Start the services (the migrations run first) and have them start at boot:
  systemctl enable --now hookline.target hookline-edge.service hookline-worker.service
  systemctl enable --now hookline-console.service      # with a [console] section in the configuration
  systemctl enable --now hookline-sandbox.service      # test hosts only: the providers' double
The database's high availability (docs/deployment.md, docs/scaling.md), with /etc/hookline/{etcd.env,patroni.yml,
haproxy.cfg} written from deploy/systemd/ha/:
  systemctl enable --now hookline-etcd.service         # on each of the three database machines first
  systemctl enable --now hookline-patroni.service      # then on each of them (postgresql@15-main disabled)
  systemctl enable --now hookline-haproxy.service      # where hookline runs; database_url points at it
EOF
