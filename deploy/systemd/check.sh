#!/usr/bin/env bash
# Checks the systemd units of deploy/systemd:
#   1. deploy/systemd/install.sh into a scratch root (DESTDIR) that also holds this host's system units;
#   2. `systemd-analyze verify --root` of every unit: no message at all (verify exits 0 on unknown keys and bad
#      values, so any output fails the check), and every program they run exists;
#   3. `systemd-analyze security --offline=yes` of every service: exposure at most MAX_EXPOSURE (default 2.0), and
#      exactly the score docs/deployment.md states for it;
#   4. the units agree with each other and with the configuration: the same hardening block in each (one for the
#      hookline services, one for the high-availability units hookline-{etcd,patroni,haproxy}), each
#      service's HEALTH_URL on the listener deploy/hookline.toml (or the console's default) gives it, the
#      sandbox's --listen where the providers' api_base points.
# Installs Debian's systemd package when systemd-analyze is missing. BIN_DIR: binaries to install (default:
# empty stand-ins, enough for verify, which only checks that the programs exist and are executable).
# Usage: bash deploy/systemd/check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
max=${MAX_EXPOSURE:-2.0}

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd-analyze not found: installing Debian's systemd package" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=(); elif command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "check.sh: not root and no sudo: install the systemd package" >&2; exit 1; fi
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd
fi
systemd-analyze --version | head -n 1

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
if [ -z "${BIN_DIR:-}" ]; then
  BIN_DIR=$root/stand-ins
  mkdir "$BIN_DIR"
  for bin in hookline-edge hookline-worker hookline; do install -m 0755 /dev/null "$BIN_DIR/$bin"; done
fi
# What the high-availability units run comes from Debian's packages (etcd-server, patroni, haproxy): stand-ins in
# the scratch root, so that the check needs none of them installed.
for prog in /usr/bin/etcd /usr/bin/patroni /usr/sbin/haproxy /bin/kill; do
  install -D -m 0755 /dev/null "$root$prog"
done
# sysinit.target, network-online.target, …: what the units order themselves after must exist in the root.
mkdir -p "$root/usr/lib/systemd"
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
echo "== deploy/systemd/install.sh into a scratch root"
DESTDIR=$root BIN_DIR=$BIN_DIR bash deploy/systemd/install.sh deploy/hookline.toml | sed 's/^/  /'

units=(hookline-migrate.service hookline-edge.service hookline-worker.service hookline-console.service
  hookline-sandbox.service hookline.target hookline-etcd.service hookline-patroni.service hookline-haproxy.service)
echo "== systemd-analyze verify ${units[*]}"
out=$(systemd-analyze verify --root="$root" "${units[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then
  echo "$out" >&2
  echo "check.sh: systemd-analyze verify said something: every message is a fault here" >&2
  exit 1
fi
echo "  no message"

echo "== systemd-analyze security --offline=yes (at most $max)"
threshold=$(awk -v m="$max" 'BEGIN { printf "%d", m * 10 + 0.5 }')
scores=$root/scores
: >"$scores"
for unit in "${units[@]}"; do
  [[ $unit == *.service ]] || continue
  status=0
  systemd-analyze security --offline=yes --root="$root" --threshold="$threshold" "$unit" >"$root/security.txt" 2>&1 ||
    status=$?
  line=$(grep -o "Overall exposure level for $unit: .*" "$root/security.txt" | sed 's/ *[^ -~]*$//') || true
  [ -n "$line" ] || { cat "$root/security.txt" >&2; echo "check.sh: no exposure level for $unit" >&2; exit 1; }
  echo "  $line"
  echo "$unit ${line##*: }" >>"$scores"
  if [ "$status" -ne 0 ]; then
    grep '✗' "$root/security.txt" >&2 || true
    echo "check.sh: $unit is more exposed than $max" >&2
    exit 1
  fi
done

echo "== units against each other, the configuration and docs/deployment.md"
/usr/bin/python3 - "$scores" <<'PY'
import re, sys, tomllib
from urllib.parse import urlsplit

problems = []
units = {u: open(f"deploy/systemd/{u}").read() for u in (
    "hookline-migrate.service", "hookline-edge.service", "hookline-worker.service",
    "hookline-console.service", "hookline-sandbox.service")}
marker = "# ---- hardening: the same in every hookline unit"

def block(text):
    start = text.find(marker)
    end = text.find("\n[", start)
    return text[start:end if end != -1 else None].strip() if start != -1 else None

blocks = {u: block(t) for u, t in units.items()}
reference = blocks["hookline-edge.service"]
for u, b in blocks.items():
    if b is None:
        problems.append(f"{u}: no hardening block ('{marker}')")
    elif b != reference:
        problems.append(f"{u}: its hardening block differs from hookline-edge.service's")
for key in ("DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes", "CapabilityBoundingSet=\n"):
    if reference and key not in reference + "\n":
        problems.append(f"the hardening block lacks {key.strip()}")
# The high-availability units (etcd, Patroni, HAProxy) share a block of their own: they run as the packages' users
# (etcd, postgres) with state on disk, so DynamicUser is not in it.
ha_marker = "# ---- hardening: the same in every high-availability unit"
ha_units = {u: open(f"deploy/systemd/{u}").read() for u in (
    "hookline-etcd.service", "hookline-patroni.service", "hookline-haproxy.service")}
def ha_block(text):
    start = text.find(ha_marker)
    if start == -1:
        return None
    lines = []
    for line in text[start:].splitlines():
        if not line.strip():
            break
        lines.append(line)
    return "\n".join(lines)
ha_reference = ha_block(ha_units["hookline-etcd.service"])
for u, t in ha_units.items():
    b = ha_block(t)
    if b is None:
        problems.append(f"{u}: no hardening block ('{ha_marker}')")
    elif b != ha_reference:
        problems.append(f"{u}: its hardening block differs from hookline-etcd.service's")
for key in ("ProtectSystem=strict", "NoNewPrivileges=yes", "CapabilityBoundingSet=\n", "SystemCallFilter=@system-service"):
    if ha_reference and key not in ha_reference + "\n":
        problems.append(f"the high-availability hardening block lacks {key.strip()}")

def setting(text, key):
    values = re.findall(rf"^{key}=(.*)$", text, re.M)
    return values[-1] if values else None

config = tomllib.load(open("deploy/hookline.toml", "rb"))
console_default = re.search(r'DEFAULT_CONSOLE_LISTEN: &str = "([^"]+)"',
                            open("crates/hookline-console/src/config.rs").read())
sandbox_unit = units["hookline-sandbox.service"]
sandbox_listen = re.search(r"sandbox --listen (\S+)", setting(sandbox_unit, "ExecStart") or "")
api_bases = {urlsplit(p["api_base"]).port for p in config.get("providers", {}).values() if "api_base" in p}
listeners = {
    "hookline-edge.service": (config["edge"]["listen"], "/readyz"),
    "hookline-worker.service": (config["worker"]["listen"], "/healthz"),
    "hookline-console.service": (config.get("console", {}).get("listen")
                                 or (console_default.group(1) if console_default else "?"), "/healthz"),
    "hookline-sandbox.service": (sandbox_listen.group(1) if sandbox_listen else "?", "/_sandbox/health"),
}
if not sandbox_listen or api_bases != {int(sandbox_listen.group(1).rsplit(":", 1)[1])}:
    problems.append(f"hookline-sandbox.service: --listen {sandbox_listen and sandbox_listen.group(1)}, "
                    f"deploy/hookline.toml's api_base ports are {sorted(api_bases)}")
for u, (listen, path) in listeners.items():
    text = units[u]
    want = f"http://127.0.0.1:{listen.rsplit(':', 1)[-1]}{path}"
    if setting(text, "Environment") != f"HEALTH_URL={want}":
        problems.append(f"{u}: Environment=HEALTH_URL={want} expected (its listener), found {setting(text, 'Environment')}")
    if setting(text, "ExecStartPost") != "/usr/local/bin/hookline-healthcheck --wait 60 ${HEALTH_URL}":
        problems.append(f"{u}: readiness must be ExecStartPost=/usr/local/bin/hookline-healthcheck --wait 60 ${{HEALTH_URL}}")
    if setting(text, "Restart") != "on-failure" or setting(text, "Type") != "exec":
        problems.append(f"{u}: Type=exec and Restart=on-failure expected")
migrate = units["hookline-migrate.service"]
if setting(migrate, "Type") != "oneshot" or not (setting(migrate, "ExecStart") or "").endswith(" migrate"):
    problems.append("hookline-migrate.service: a Type=oneshot running `hookline … migrate` expected")
for u in ("hookline-edge.service", "hookline-worker.service", "hookline-console.service"):
    if setting(units[u], "Requires") != "hookline-migrate.service" or "hookline-migrate.service" not in (setting(units[u], "After") or ""):
        problems.append(f"{u}: Requires= and After=hookline-migrate.service expected")

# docs/deployment.md (the manual's "Deploying") states each unit's exposure: it must be the one just measured.
readme = open("docs/deployment.md").read()
for line in open(sys.argv[1]):
    unit, score = line.split(maxsplit=1)
    score = score.strip()
    m = re.search(rf"^\| `{re.escape(unit)}` \| ([^|]+?) \|", readme, re.M)
    if not m:
        problems.append(f"docs/deployment.md: no row | `{unit}` | {score} | in the exposure table")
    elif m.group(1).strip() != score:
        problems.append(f"docs/deployment.md: {unit} exposure {m.group(1).strip()!r}, systemd-analyze says {score!r}")
for p in problems:
    print(f"check.sh: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"  hardening identical in {len(units)} services and in {len(ha_units)} high-availability units; health URLs: " +
      ", ".join(f"{u.split('.')[0].removeprefix('hookline-')} {l.rsplit(':', 1)[-1]}{p}" for u, (l, p) in listeners.items()))
PY
echo "  SUCCESS: deploy/systemd units verify, are hardened and agree with the configuration"
