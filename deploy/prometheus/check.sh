#!/usr/bin/env bash
# Validates the alerting side: rule syntax, scrape config, rule unit tests, Grafana dashboard.
#   bash deploy/prometheus/check.sh
# Installs Debian's `prometheus` package (for promtool) when promtool is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if ! command -v promtool >/dev/null 2>&1; then
    echo "promtool not found: installing Debian's prometheus package" >&2
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "promtool is missing and this is not root, without sudo: install the prometheus package" >&2
        exit 1
    fi
    # The package's postinst may start a prometheus server (systemd or init script). Remember which
    # prometheus processes already ran, and stop only the ones the installation started, by pid.
    before=" $(pgrep -x prometheus | tr '\n' ' ' || true) "
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends prometheus
    for pid in $(pgrep -x prometheus || true); do
        case "$before" in
            *" $pid "*) ;;
            *) echo "stopping prometheus server $pid started by the package installation" >&2
               "${SUDO[@]}" kill "$pid" || true ;;
        esac
    done
    command -v promtool >/dev/null 2>&1 || { echo "promtool still missing after install" >&2; exit 1; }
fi
promtool --version 2>&1 | head -n 1

echo "== promtool check rules alerts.yml"
promtool check rules alerts.yml
echo "== promtool check config prometheus.yml"
promtool check config prometheus.yml
echo "== promtool test rules alerts_test.yml"
promtool test rules alerts_test.yml

echo "== grafana-dashboard.json"
python3 -m json.tool grafana-dashboard.json >/dev/null
# Every panel query must parse as PromQL: substitute the Grafana variables and let promtool check them as
# recording rules.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 - grafana-dashboard.json "$tmp/dashboard-queries.yml" <<'PY'
import json, sys
dash = json.load(open(sys.argv[1]))
assert isinstance(dash.get("schemaVersion"), int), "schemaVersion missing"
names = [v["name"] for v in dash["templating"]["list"]]
assert any(v["type"] == "datasource" for v in dash["templating"]["list"]), "no datasource variable"
exprs = []
for p in dash["panels"]:
    if p["type"] == "row":
        continue
    assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", f'panel {p["title"]}: datasource'
    for t in p["targets"]:
        e = t["expr"].replace("$__rate_interval", "1m")
        for n in names:
            e = e.replace("$" + n, ".*")
        exprs.append(e)
assert exprs, "no queries"
with open(sys.argv[2], "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        f.write(f"      - record: dashboard:query{i}\n        expr: {json.dumps(e)}\n")
print(f"  {sum(p['type'] != 'row' for p in dash['panels'])} panels, {len(exprs)} queries")
PY
promtool check rules "$tmp/dashboard-queries.yml" | sed 's/^/  /'
echo "  SUCCESS: grafana-dashboard.json is valid JSON and every query parses"
