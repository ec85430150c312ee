#!/usr/bin/env bash
# Validates the deployment files under deploy/ without a cluster or a
# Docker engine (the end-to-end test crates/txgate/tests/it/deploy.rs also
# runs deploy/haproxy/haproxy.cfg in front of real instances):
#   - deploy/haproxy/haproxy.cfg: `haproxy -c` with every address set;
#   - deploy/kubernetes: each manifest decoded strictly into the Kubernetes
#     API types (deploy/kubernetes/check, Go), cross-checked, and the
#     ConfigMap's txgate.toml accepted by `txgate check-config`;
#   - deploy/prometheus: `promtool check rules` and `check config`, the
#     rules' unit tests (`promtool test rules`), and every alert tested both
#     firing and silent;
#   - deploy/grafana: the dashboard is valid JSON, what its generator writes,
#     and every panel and query reads the `${datasource}` variable.
# deploy/Dockerfile is not built here (no Docker engine on these machines).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v promtool >/dev/null || { echo "promtool missing: run scripts/install-test-tools.sh" >&2; exit 1; }
command -v haproxy >/dev/null || { echo "haproxy missing: run scripts/install-test-tools.sh" >&2; exit 1; }
command -v go >/dev/null || { echo "go missing: the Kubernetes manifests are checked with Go (the Go toolchain)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs a command quietly; on failure prints what it said and stops.
quiet() {
  local out
  out=$("$@" 2>&1) || { printf '%s\n' "$out" >&2; echo "failed: $*" >&2; exit 1; }
}

quiet promtool check rules deploy/prometheus/txgate-rules.yml
quiet promtool check config deploy/prometheus/prometheus.yml
quiet promtool test rules deploy/prometheus/txgate-rules.test.yml
# Every alert has a test case that fires it (with its severity and summary)
# and one where it stays silent; every rule has the labels and annotations
# the runbooks rely on.
python3 - deploy/prometheus/txgate-rules.yml deploy/prometheus/txgate-rules.test.yml <<'EOF'
import re, sys, yaml

rules_path, tests_path = sys.argv[1:3]
rules = [r for g in yaml.safe_load(open(rules_path))["groups"] for r in g["rules"]]
errors = []
alerts = []
for r in rules:
    if "record" in r:
        if not re.fullmatch(r"instance(_[a-z]+)*:txgate_[a-z0-9_]+:[a-z0-9_]+", r["record"]):
            errors.append(f"recording rule {r['record']}: not named instance[_label]:txgate_<what>:<op>")
        continue
    name = r["alert"]
    alerts.append(name)
    if r.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
        errors.append(f"{name}: no severity label (critical, warning or info)")
    for key in ("summary", "description", "runbook"):
        if not r.get("annotations", {}).get(key, "").strip():
            errors.append(f"{name}: no {key} annotation")
firing, silent = set(), set()
for group in yaml.safe_load(open(tests_path))["tests"]:
    for case in group.get("alert_rule_test") or []:
        name = case["alertname"]
        exp = case.get("exp_alerts") or []
        if not exp:
            silent.add(name)
        for a in exp:
            if "severity" in (a.get("exp_labels") or {}) and "summary" in (a.get("exp_annotations") or {}):
                firing.add(name)
            else:
                errors.append(f"{name}: a firing case without exp_labels.severity or exp_annotations.summary")
for name in alerts:
    if name not in firing:
        errors.append(f"{name}: no test case where it fires ({tests_path})")
    if name not in silent:
        errors.append(f"{name}: no test case where it stays silent ({tests_path})")
for name in sorted((firing | silent) - set(alerts)):
    errors.append(f"{name}: tested in {tests_path} but not an alert of {rules_path}")
if errors:
    sys.exit("\n".join(errors))
print(f"deploy/prometheus/txgate-rules.yml: valid, {len(rules) - len(alerts)} recording rules, "
      f"{len(alerts)} alerts, each tested firing and silent")
EOF

python3 -m json.tool deploy/grafana/txgate.json >/dev/null
python3 deploy/grafana/build-dashboard.py --check
# Every panel and query on the ${datasource} variable, every query a plain
# PromQL string filtered by $instance, no other variable than those
# Grafana defines for Prometheus queries.
python3 - deploy/grafana/txgate.json "$work/dashboard-queries.yml" <<'EOF'
import json, re, sys

path, queries_path = sys.argv[1:3]
d = json.load(open(path))
ds = {"type": "prometheus", "uid": "${datasource}"}
allowed = {"instance", "__rate_interval", "__interval", "__range"}
errors = []
variables = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
if variables.get("datasource", {}).get("type") != "datasource" or variables["datasource"].get("query") != "prometheus":
    errors.append("no `datasource` variable of type datasource (prometheus)")
inst = variables.get("instance", {})
if not (inst.get("type") == "query" and inst.get("multi") and inst.get("includeAll")):
    errors.append("no `instance` query variable with multi and include all")
panels = list(d["panels"])
for p in d["panels"]:
    panels += p.get("panels", [])
exprs = 0
for p in panels:
    where = f"panel {p.get('id')} ({p.get('title')})"
    if p.get("datasource") != ds:
        errors.append(f"{where}: datasource is not ${{datasource}}")
    if p.get("type") != "row" and not p.get("targets"):
        errors.append(f"{where}: no query")
    if p.get("type") not in ("row", "timeseries", "stat"):
        errors.append(f"{where}: type {p.get('type')} (timeseries or stat)")
    if p.get("type") != "row" and not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
        errors.append(f"{where}: no unit")
    for t in p.get("targets", []):
        expr = t.get("expr")
        if t.get("datasource") != ds:
            errors.append(f"{where} {t.get('refId')}: datasource is not ${{datasource}}")
        if not isinstance(expr, str) or not expr.strip():
            errors.append(f"{where} {t.get('refId')}: no PromQL expr")
            continue
        exprs += 1
        for v in re.findall(r"\$\{?(\w+)", expr):
            if v not in allowed:
                errors.append(f"{where}: variable ${v} (only {', '.join(sorted(allowed))})")
        # Every metric read is filtered by the instance variable.
        for m in re.finditer(r"\b((?:instance\w*:)?txgate_\w+(?::\w+)?)\b(\{[^}]*\})?", expr):
            if 'instance=~"$instance"' not in (m.group(2) or ""):
                errors.append(f'{where}: {m.group(1)} not filtered by instance=~"$instance"')
if errors:
    sys.exit("\n".join(errors))
# The queries as recording rules, for promtool to parse them: $instance as
# "all", the interval variables as a window.
with open(queries_path, "w") as out:
    out.write("groups:\n  - name: dashboard\n    rules:\n")
    for p in panels:
        for t in p.get("targets", []):
            expr = t["expr"].replace("$instance", ".+")
            expr = re.sub(r"\$\{?(__rate_interval|__interval|__range)\}?", "1m", expr)
            out.write(f"      - record: dashboard:panel_{p['id']}:{t['refId']}\n")
            out.write(f"        expr: {json.dumps(expr)}\n")
print(f"{path}: valid, {len(panels)} panels, {exprs} queries, all on ${{datasource}} and $instance")
EOF
quiet promtool check rules "$work/dashboard-queries.yml"

TXGATE_LB_BIND=127.0.0.1:8545 TXGATE_LB_STATS="$work/haproxy.sock" \
TXGATE_1=127.0.0.1:18545 TXGATE_2=127.0.0.1:28545 TXGATE_3=127.0.0.1:38545 \
TXGATE_1_ADMIN=19545 TXGATE_2_ADMIN=29545 TXGATE_3_ADMIN=39545 \
  haproxy -c -q -f deploy/haproxy/haproxy.cfg
echo "deploy/haproxy/haproxy.cfg: valid"

(cd deploy/kubernetes/check && go run . -dir .. -toml "$work/txgate.toml")
# The snapshot folder is the pod's emptyDir; here, a temporary one.
mkdir -p "$work/state"
sed -i "s#/var/lib/txgate#$work/state#" "$work/txgate.toml"
cargo build --locked -q -p txgate
target/debug/txgate check-config --config "$work/txgate.toml" >/dev/null
echo "deploy/kubernetes/configmap.yaml: txgate.toml accepted by txgate check-config"
