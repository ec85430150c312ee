#!/usr/bin/env python3
"""Writes deploy/grafana/txgate.json, the Grafana dashboard of a txgate fleet.

The dashboard is generated so that every panel has the same data source, the
same instance filter and a unit, and the layout follows the request path:
traffic, screening, sidecar, state, upstream, limits and the fleet,
conditional and sync calls, WebSocket, TLS, the Aeges listener.
Edit the panels here, then run:

    python3 deploy/grafana/build-dashboard.py          # rewrite txgate.json
    python3 deploy/grafana/build-dashboard.py --check  # exit 1 if it differs

(scripts/check-deploy.sh runs --check). Queries use only metrics txgate
registers (crates/txgate-proxy/src/metrics/) and the recording rules of
deploy/prometheus/txgate-rules.yml; the only variables are $instance and
$__rate_interval.
"""

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "txgate.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
I = 'instance=~"$instance"'


def rate(metric, by, extra=""):
    """sum by (by) of a counter's per-second rate over $__rate_interval."""
    sel = f"{I}, {extra}" if extra else I
    return f"sum by ({by}) (rate({metric}{{{sel}}}[$__rate_interval]))"


class Layout:
    def __init__(self):
        self.panels = []
        self.y = 0
        self.x = 0
        self.row_h = 0
        self.next_id = 1

    def _id(self):
        self.next_id += 1
        return self.next_id - 1

    def row(self, title):
        self._newline()
        self.panels.append(
            {
                "collapsed": False,
                "datasource": DS,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "id": self._id(),
                "panels": [],
                "title": title,
                "type": "row",
            }
        )
        self.y += 1

    def _newline(self):
        if self.x:
            self.y += self.row_h
            self.x = 0
            self.row_h = 0

    def _place(self, w, h):
        if self.x + w > 24:
            self._newline()
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def _targets(self, targets):
        out = []
        for i, (expr, legend) in enumerate(targets):
            out.append(
                {
                    "datasource": DS,
                    "editorMode": "code",
                    "expr": expr,
                    "legendFormat": legend,
                    "range": True,
                    "refId": chr(ord("A") + i),
                }
            )
        return out

    def timeseries(self, title, desc, unit, targets, threshold=None, w=8, h=8, max_=None):
        steps = [{"color": "green", "value": None}]
        if threshold is not None:
            steps.append({"color": "red", "value": threshold})
        defaults = {
            "color": {"mode": "palette-classic"},
            "custom": {
                "axisPlacement": "auto",
                "drawStyle": "line",
                "fillOpacity": 10,
                "lineInterpolation": "linear",
                "lineWidth": 1,
                "showPoints": "never",
                "spanNulls": False,
                "stacking": {"group": "A", "mode": "none"},
                "thresholdsStyle": {"mode": "line" if threshold is not None else "off"},
            },
            "min": 0,
            "thresholds": {"mode": "absolute", "steps": steps},
            "unit": unit,
        }
        if max_ is not None:
            defaults["max"] = max_
        self.panels.append(
            {
                "datasource": DS,
                "description": desc,
                "fieldConfig": {"defaults": defaults, "overrides": []},
                "gridPos": self._place(w, h),
                "id": self._id(),
                "options": {
                    "legend": {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"},
                },
                "targets": self._targets(targets),
                "title": title,
                "type": "timeseries",
            }
        )

    def stat(self, title, desc, unit, targets, threshold=None, w=4, h=4):
        steps = [{"color": "green", "value": None}]
        if threshold is not None:
            steps.append({"color": "red", "value": threshold})
        self.panels.append(
            {
                "datasource": DS,
                "description": desc,
                "fieldConfig": {
                    "defaults": {
                        "color": {"mode": "thresholds"},
                        "thresholds": {"mode": "absolute", "steps": steps},
                        "unit": unit,
                    },
                    "overrides": [],
                },
                "gridPos": self._place(w, h),
                "id": self._id(),
                "options": {
                    "colorMode": "value",
                    "graphMode": "area",
                    "justifyMode": "auto",
                    "orientation": "auto",
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "textMode": "auto",
                },
                "targets": self._targets(targets),
                "title": title,
                "type": "stat",
            }
        )


def build():
    d = Layout()

    d.row("Overview")
    d.stat(
        "Requests/s",
        "HTTP requests answered per second, every outcome, over the selected instances.",
        "reqps",
        [(f"sum(rate(txgate_http_responses_total{{{I}}}[$__rate_interval]))", "requests/s")],
    )
    d.stat(
        "Screened refusal share",
        "Share of screened raw transactions refused (or would be, in monitor-only mode), last 5 minutes.",
        "percentunit",
        [
            (
                f"sum(instance:txgate_screen_refusals:rate5m{{{I}}}) / sum(instance:txgate_screen_decisions:rate5m{{{I}}})",
                "refused",
            )
        ],
    )
    d.stat(
        "Screening p99, worst instance",
        "Highest per-instance p99 of the screening time (raw param to decision). Budget: 1 ms.",
        "s",
        [(f"max(instance:txgate_screen_duration_seconds:p99_5m{{{I}}})", "p99")],
        threshold=0.001,
    )
    d.stat(
        "Sidecar sources up / configured",
        "Sidecar streams open, against the sources configured. Below: txgate fails open for the missing ones.",
        "short",
        [
            (f"sum(txgate_sidecar_up{{{I}}})", "up"),
            (f"count(txgate_sidecar_source_up{{{I}}})", "configured"),
        ],
    )
    d.stat(
        "Upstream up / instances",
        "Instances whose upstream health probe (eth_chainId) succeeds, against the instances shown.",
        "short",
        [
            (f"sum(txgate_upstream_up{{{I}}})", "up"),
            (f"count(txgate_upstream_up{{{I}}})", "instances"),
        ],
    )
    d.stat(
        "Draining",
        "Instances draining for shutdown (/readyz answers 503).",
        "short",
        [(f"sum(txgate_draining{{{I}}})", "draining")],
        threshold=1,
    )

    d.row("Traffic")
    d.timeseries(
        "JSON-RPC calls by method",
        "Calls received per second by method (methods outside txgate's fixed list count as other).",
        "reqps",
        [(rate("txgate_rpc_calls_total", "method"), "{{method}}")],
    )
    d.timeseries(
        "Responses by outcome",
        "HTTP requests answered per second by how they ended (forwarded, screened, overloaded, rate_limited, ...).",
        "reqps",
        [(rate("txgate_http_responses_total", "outcome"), "{{outcome}}")],
    )
    d.timeseries(
        "Request latency p50 / p99",
        "Admission to response, per instance (recorded over 5 minutes).",
        "s",
        [
            (f"instance:txgate_request_duration_seconds:p50_5m{{{I}}}", "{{instance}} p50"),
            (f"instance:txgate_request_duration_seconds:p99_5m{{{I}}}", "{{instance}} p99"),
        ],
    )
    d.timeseries(
        "In flight vs admission cap",
        "Requests admitted and not yet answered, against admission.max_in_flight (beyond it: 429).",
        "short",
        [
            (f"txgate_in_flight_requests{{{I}}}", "{{instance}} in flight"),
            (f"txgate_admission_max_in_flight{{{I}}}", "{{instance}} cap"),
        ],
        w=6,
    )
    d.timeseries(
        "In flight, 5 min peak share of the cap",
        "Highest sampled in-flight count over 5 minutes divided by admission.max_in_flight. Alert at 90%.",
        "percentunit",
        [(f"instance:txgate_in_flight_requests:ratio_to_cap_max5m{{{I}}}", "{{instance}}")],
        threshold=0.9,
        w=6,
    )
    d.timeseries(
        "Admission refusals (429 overloaded)",
        "Requests refused per second because admission.max_in_flight was reached.",
        "reqps",
        [(rate("txgate_http_responses_total", "instance", 'outcome="overloaded"'), "{{instance}}")],
        w=6,
    )
    d.timeseries(
        "Client connections",
        "Open client connections per instance.",
        "short",
        [(f"txgate_open_connections{{{I}}}", "{{instance}}")],
        w=6,
    )

    d.row("Screening")
    d.timeseries(
        "Screening decisions by reason",
        "Screened raw transactions per second: forwarded (clean, suspect, contract_creation), refused and "
        "would_refuse (monitor-only) by reason.",
        "reqps",
        [(rate("txgate_screen_decisions_total", "decision, reason"), "{{decision}} {{reason}}")],
    )
    d.timeseries(
        "Refusal share, 5 min and 1 h",
        "Share of screened submissions refused (or would be) over 5 minutes, against its 1 hour average: "
        "the refusal spike alert compares the two.",
        "percentunit",
        [
            (f"instance:txgate_screen_refusals:ratio_rate5m{{{I}}}", "{{instance}} 5m"),
            (f"instance:txgate_screen_refusals:ratio_rate1h{{{I}}}", "{{instance}} 1h average"),
        ],
        max_=1,
    )
    d.timeseries(
        "Screening latency p50 / p99",
        "Raw param to decision, per instance, including a ShouldForward question when one is asked. "
        "Budget: p99 under 1 ms.",
        "s",
        [
            (f"instance:txgate_screen_duration_seconds:p50_5m{{{I}}}", "{{instance}} p50"),
            (f"instance:txgate_screen_duration_seconds:p99_5m{{{I}}}", "{{instance}} p99"),
        ],
        threshold=0.001,
    )
    d.timeseries(
        "Stage latency p50",
        "Median time of each screening step over the selected instances: candidate (hex, tx hash), each "
        "stage in order, probe (ShouldForward when asked).",
        "s",
        [
            (
                "histogram_quantile(0.5, sum by (stage, le) "
                f"(instance_stage_le:txgate_screen_stage_duration_seconds_bucket:rate5m{{{I}}}))",
                "{{stage}}",
            )
        ],
        w=6,
    )
    d.timeseries(
        "Stage latency p99",
        "p99 of each screening step over the selected instances. An in-process stage (all but probe) over "
        "1 ms fires the screening alert.",
        "s",
        [
            (
                "histogram_quantile(0.99, sum by (stage, le) "
                f"(instance_stage_le:txgate_screen_stage_duration_seconds_bucket:rate5m{{{I}}}))",
                "{{stage}}",
            )
        ],
        threshold=0.001,
        w=6,
    )
    d.timeseries(
        "Sender cache hit ratio",
        "Sender lookups answered from the cache; each miss costs one ECDSA recovery.",
        "percentunit",
        [(f"instance:txgate_screen_sender_cache:hit_ratio_rate5m{{{I}}}", "{{instance}}")],
        max_=1,
        w=6,
    )
    d.timeseries(
        "Refusal log lines suppressed",
        "Refusal log lines per second left out by the per-reason sampling (the refusals still count above).",
        "short",
        [(rate("txgate_refusal_log_suppressed_total", "reason"), "{{reason}}")],
        w=6,
    )

    d.row("Sidecar")
    d.timeseries(
        "Sidecar link up, per source",
        "1 while the source's stream is open. 0: txgate fails open for what that source would teach it.",
        "short",
        [(f"txgate_sidecar_source_up{{{I}}}", "{{instance}} {{protocol}} {{url}}")],
        max_=1,
    )
    d.timeseries(
        "Sidecar reconnects",
        "Connection attempts that failed and streams that ended, per second.",
        "short",
        [(rate("txgate_sidecar_reconnects_total", "instance"), "{{instance}}")],
    )
    d.timeseries(
        "Sidecar lag p50 / p99",
        "From the sidecar observing an invalidation to txgate reading it.",
        "s",
        [
            (f"instance:txgate_sidecar_lag_seconds:p50_5m{{{I}}}", "{{instance}} p50"),
            (f"instance:txgate_sidecar_lag_seconds:p99_5m{{{I}}}", "{{instance}} p99"),
        ],
    )
    d.timeseries(
        "Invalidations received and applied",
        "Invalidations received per second, and what applying them did, by result.",
        "short",
        [
            (f"sum(rate(txgate_sidecar_invalidations_received_total{{{I}}}[$__rate_interval]))", "received"),
            (rate("txgate_invalidations_total", "result"), "{{result}}"),
        ],
        w=6,
    )
    d.timeseries(
        "Invalidation queue",
        "Invalidations queued and not yet applied, and how often per second the queue was full (the "
        "stream then waits for room).",
        "short",
        [
            (f"txgate_sidecar_queue_depth{{{I}}}", "{{instance}} depth"),
            (rate("txgate_sidecar_queue_full_total", "instance"), "{{instance}} full/s"),
        ],
        w=6,
    )
    d.timeseries(
        "ShouldForward questions by result",
        "forward, deny, timeout and error (forwarded), unknown, saturated (not asked).",
        "reqps",
        [(rate("txgate_should_forward_total", "result"), "{{result}}")],
        w=6,
    )
    d.timeseries(
        "Result stream by status",
        "Transaction results from sidecar.transport.v1 sources, by status.",
        "short",
        [(rate("txgate_sidecar_results_total", "status"), "{{status}}")],
        w=6,
    )

    d.row("State")
    d.timeseries(
        "Cache fill (entries / bound)",
        "Each bounded screening cache's entries against its bound. At the bound the oldest entries are "
        "evicted; alert at 95%.",
        "percentunit",
        [(f"instance_cache:txgate_screen_entries:ratio_to_capacity{{{I}}}", "{{instance}} {{cache}}")],
        threshold=0.95,
    )
    d.timeseries(
        "Cache entries",
        "Entries held by each screening cache, over the selected instances.",
        "short",
        [(f"sum by (cache) (txgate_screen_entries{{{I}}})", "{{cache}}")],
    )
    d.timeseries(
        "Ban snapshot age",
        "Time since the last ban snapshot was written, against three snapshot intervals (the stale alert).",
        "s",
        [
            (f"time() - (txgate_ban_snapshot_last_success_timestamp_seconds{{{I}}} > 0)", "{{instance}} age"),
            (f"3 * (txgate_ban_snapshot_interval_seconds{{{I}}} > 0)", "{{instance}} 3 intervals"),
        ],
    )
    d.timeseries(
        "Ban snapshot writes and load failures",
        "Snapshot writes per second by result, and snapshot files refused at start by reason.",
        "short",
        [
            (rate("txgate_ban_snapshots_total", "result"), "write {{result}}"),
            (rate("txgate_ban_snapshot_load_failures_total", "reason"), "load {{reason}}"),
        ],
        w=12,
    )
    d.timeseries(
        "Ban changes from the admin endpoint",
        "Bans lifted and imported through the admin endpoint (txgate bans ...), per second by action.",
        "short",
        [(rate("txgate_admin_ban_changes_total", "action"), "{{action}}")],
        w=12,
    )

    d.row("Upstream")
    d.timeseries(
        "Upstream latency p50 / p99",
        "Upstream round trip, request sent to full body, per instance (successful calls).",
        "s",
        [
            (f"instance:txgate_upstream_duration_seconds:p50_5m{{{I}}}", "{{instance}} p50"),
            (f"instance:txgate_upstream_duration_seconds:p99_5m{{{I}}}", "{{instance}} p99"),
        ],
        w=6,
    )
    d.timeseries(
        "Upstream errors by kind",
        "Failed upstream calls per second: connect, timeout, io, malformed, status, too_large.",
        "reqps",
        [(rate("txgate_upstream_errors_total", "kind"), "{{kind}}")],
        w=6,
    )
    d.timeseries(
        "Upstream error ratio",
        "Failed calls over all upstream calls, per instance; alert at 5%.",
        "percentunit",
        [(f"instance:txgate_upstream_errors:ratio_rate5m{{{I}}}", "{{instance}}")],
        threshold=0.05,
        max_=1,
        w=6,
    )
    d.timeseries(
        "Upstream health probe",
        "1 while the upstream health probe (eth_chainId) succeeds; 0 makes /readyz answer 503.",
        "short",
        [(f"txgate_upstream_up{{{I}}}", "{{instance}}")],
        max_=1,
        w=6,
    )

    d.row("Node group")
    d.timeseries(
        "Nodes in",
        "1 while a node of the group takes calls (txgate_upstream_node_up), by instance and node; "
        "/readyz names why one is out. The short form is one node, `upstream`.",
        "short",
        [(f"txgate_upstream_node_up{{{I}}}", "{{instance}} {{node}} ({{role}})")],
        max_=1,
        w=6,
    )
    d.timeseries(
        "Node lag (blocks)",
        "Blocks each node's head is behind the group's best head (out past upstream.max_block_lag), "
        "the worst instance's view.",
        "short",
        [
            (f"max by (node) (txgate_upstream_node_lag_blocks{{{I}}})", "{{node}} lag"),
        ],
        w=6,
    )
    d.timeseries(
        "Calls by node",
        "HTTP calls and batches sent to each node of a group per second (the one-node short form and "
        "WebSocket calls are not counted here); reads spread over the replicas by weight and calls "
        "in flight.",
        "reqps",
        [(rate("txgate_upstream_node_calls_total", "node"), "{{node}}")],
        w=6,
    )
    d.timeseries(
        "No healthy node, failovers",
        "Calls that found no healthy node of their role, by role (HTTP calls answered 503, WebSocket "
        "messages and upgrades answered the same, reads that failed once more after a retry), and "
        "calls sent to another node than the first chosen (not_written: never reached the first; "
        "read_retry: a read asked again), per second.",
        "reqps",
        [
            (rate("txgate_upstream_no_healthy_total", "role"), "no healthy {{role}}"),
            (rate("txgate_upstream_failovers_total", "reason"), "failover {{reason}}"),
        ],
        w=6,
    )
    d.timeseries(
        "Node round trip p99",
        "Each node's round trip for HTTP calls over a group, request to full body, 99th percentile "
        "over the instances shown (empty for the one-node short form).",
        "s",
        [
            (
                f"histogram_quantile(0.99, sum by (node, le) "
                f"(rate(txgate_upstream_node_duration_seconds_bucket{{{I}}}[$__rate_interval])))",
                "{{node}}",
            )
        ],
        w=12,
    )
    d.timeseries(
        "WebSocket sessions by node",
        "Client WebSocket sessions open, by the node they read from (their home); a node taken out "
        "closes its sessions with 1012 and they reconnect to the others.",
        "short",
        [(f"sum by (node) (txgate_ws_sessions_by_node{{{I}}})", "{{node}}")],
        w=12,
    )

    d.row("Limits and fleet")
    d.timeseries(
        "Per-client refusals by limit",
        "Requests refused by a per-client limit per second: ip_rate, ip_tx_rate, key_rate, key_tx_rate, "
        "unknown_key.",
        "reqps",
        [(rate("txgate_limit_refusals_total", "limit"), "{{limit}}")],
        w=6,
    )
    d.timeseries(
        "Tracked clients",
        "Clients tracked by the rate limits, by table: ip and key (bounded by limits.max_clients), caller "
        "(signed conditional callers, bounded by conditional.max_callers).",
        "short",
        [(f"sum by (table) (txgate_limit_tracked_clients{{{I}}})", "{{table}}")],
        w=6,
    )
    d.timeseries(
        "Paced refusals",
        "Refusals of clients on a streak of refusals per second (screen.pacing): held (answered later), "
        "over_bound (due a hold, answered at once: screen.pacing.max_held held already), untracked (the "
        "table of streaks was full).",
        "reqps",
        [(rate("txgate_pacing_refusals_total", "result"), "{{result}}")],
        w=6,
    )
    d.timeseries(
        "Refusals held and clients on a streak",
        "Answers held right now (bounded by screen.pacing.max_held) and clients with a streak of refusals "
        "(bounded by screen.pacing.max_clients).",
        "short",
        [
            (f"sum(txgate_pacing_held{{{I}}})", "held"),
            (f"sum(txgate_pacing_clients{{{I}}})", "clients on a streak"),
        ],
        w=6,
    )

    d.timeseries(
        "Fleet Redis up",
        "1 while syncs with the fleet's Redis succeed (limits are fleet-wide); 0: each instance enforces "
        "its local share.",
        "short",
        [(f"txgate_redis_up{{{I}}}", "{{instance}}")],
        max_=1,
        w=6,
    )
    d.timeseries(
        "Fleet ban log by event",
        "Bans shared through the fleet's ban log in Redis (<key_prefix>:bans:log) per second, by event: "
        "appended (Redis confirmed), append_failed (appends that failed, retried), dropped (not shared: "
        "outbox full), received and replayed (read from the others' entries), malformed, reconnect, gap "
        "(unread entries cut while live: bans possibly missed), reset (the log read again after a failover).",
        "short",
        [(rate("txgate_fleet_bans_total", "event"), "{{event}}")],
        w=6,
    )
    d.timeseries(
        "Ban log lag",
        "How far behind the fleet's ban log each instance reads: the age of the last entry applied while "
        "a backlog is read (64 entries a read), 0 when caught up.",
        "s",
        [(f"txgate_fleet_ban_log_lag_seconds{{{I}}}", "{{instance}}")],
        w=4,
    )
    d.timeseries(
        "Ban log entries unread",
        "Entries of the fleet's ban log each instance has not read yet, measured each second (needs "
        "Redis 7; 0 after a resume from a saved position until the reader first catches up).",
        "short",
        [(f"txgate_fleet_ban_log_lag_entries{{{I}}}", "{{instance}}")],
        w=4,
    )
    d.timeseries(
        "Ban log outbox",
        "Bans each instance learned and has not yet appended to the fleet's ban log (Redis down or slow). "
        "At 4096, further bans are not shared (dropped) and hold on that instance only.",
        "short",
        [(f"txgate_fleet_ban_log_outbox{{{I}}}", "{{instance}}")],
        threshold=4096,
        w=4,
    )

    d.row("Conditional and sync calls")
    d.timeseries(
        "Conditional calls by result",
        "eth_sendRawTransactionConditional calls per second by what the gates decided: accepted, "
        "would_refuse, disabled, missing, invalid, cost_exceeded, undecodable, target, unauthenticated, "
        "bad_authentication, caller_denied, rate_limited, caller_rate_limited.",
        "reqps",
        [(rate("txgate_conditional_total", "result"), "{{result}}")],
        w=6,
    )
    d.timeseries(
        "Conditional callers",
        "Conditional calls that passed the caller check per second, signed (X-Optimism-Signature) or "
        "unsigned, and signatures that did not verify, by reason.",
        "reqps",
        [
            (rate("txgate_conditional_callers_total", "kind"), "{{kind}}"),
            (rate("txgate_conditional_auth_failures_total", "reason"), "bad: {{reason}}"),
        ],
        w=6,
    )
    d.timeseries(
        "Conditional switch",
        "1 while eth_sendRawTransactionConditional is accepted (conditional.enabled; SIGHUP or POST "
        "/conditional on the admin listener).",
        "short",
        [(f"txgate_conditional_enabled{{{I}}}", "{{instance}}")],
        max_=1,
        w=6,
    )
    d.timeseries(
        "Sync calls in flight",
        "eth_sendRawTransactionSync calls waiting for their receipt, against admission.max_sync_in_flight, "
        "and those refused at the cap per second.",
        "short",
        [
            (f"sum by (instance) (txgate_upstream_sync_in_flight{{{I}}})", "{{instance}} in flight"),
            (f"sum by (instance) (txgate_upstream_sync_max_in_flight{{{I}}})", "{{instance}} cap"),
            (rate("txgate_upstream_sync_refused_total", "instance"), "{{instance}} refused/s"),
        ],
        w=6,
    )

    d.row("WebSocket")
    d.timeseries(
        "Open sockets and subscriptions",
        "Client WebSocket sessions open (each with its own socket to the node, for its subscriptions and "
        "calls with large answers) and the subscriptions they hold (bounded by websocket.max_subscriptions).",
        "short",
        [
            (f"sum (txgate_ws_open_sockets{{{I}}})", "sockets"),
            (f"sum (txgate_ws_subscriptions{{{I}}})", "subscriptions"),
        ],
        w=6,
    )
    d.timeseries(
        "Messages by direction and outcome",
        "Messages per second: in (from clients, by outcome, as txgate_requests_total), out (answers and "
        "relayed subscription notifications).",
        "short",
        [(rate("txgate_ws_messages_total", "direction, outcome"), "{{direction}} {{outcome}}")],
        w=6,
    )
    d.timeseries(
        "Closes by reason",
        "Sessions ended per second: client, upstream (1011), idle, ping_timeout, shutdown (1001), "
        "slow_reader (send queue over websocket.max_send_queue_bytes), too_big (1009), frame_rate (1008), "
        "binary (1003), protocol.",
        "short",
        [(rate("txgate_ws_closes_total", "reason"), "{{reason}}")],
        w=6,
    )
    d.timeseries(
        "Upgrades and refused subscriptions",
        "Upgrade requests per second by result (upgraded, bad_handshake, upstream_unavailable), and "
        "eth_subscribe calls refused over a subscription cap.",
        "reqps",
        [
            (rate("txgate_ws_upgrades_total", "result"), "{{result}}"),
            (f"sum (rate(txgate_ws_subscriptions_refused_total{{{I}}}[$__rate_interval]))",
             "subscriptions refused"),
        ],
        w=6,
    )
    d.timeseries(
        "Lanes: shared node sockets",
        "Lanes open (one socket to the node per worker, carrying the plain calls of every client socket on "
        "it: websocket.shared_upstream), and per second: lanes opened, failed (their calls answered "
        "-32603) and messages refused over the lane's queue bound (queue_full).",
        "short",
        [
            (f"sum by (instance) (txgate_ws_lanes_open{{{I}}})", "{{instance}} open"),
            (rate("txgate_ws_lane_events_total", "event"), "{{event}}/s"),
        ],
        w=6,
    )

    d.row("TLS")
    d.timeseries(
        "Client handshakes by outcome",
        "TLS handshakes on the client port per second: full, full_retry (HelloRetryRequest), resumed, "
        "or why one failed (timeout, eof, not_tls, no_shared_group, no_shared_cipher, no_shared_version, "
        "incompatible, alert_received, other).",
        "reqps",
        [(rate("txgate_tls_handshakes_total", "outcome"), "{{outcome}}")],
        w=6,
    )
    d.timeseries(
        "Client handshakes by version and group",
        "Finished handshakes per second by protocol version and key-exchange group (X25519MLKEM768: the "
        "post-quantum hybrid).",
        "reqps",
        [(rate("txgate_tls_handshakes_total", "version, group"), "TLS {{version}} {{group}}")],
        w=6,
    )
    d.timeseries(
        "Upstream handshakes by outcome",
        "TLS handshakes with an https:// node per second: ok (one per pooled connection), or why one "
        "failed (expired, name_mismatch, unknown_issuer, bad_certificate, alert, timeout, io, other).",
        "reqps",
        [(rate("txgate_upstream_tls_handshakes_total", "outcome"), "{{outcome}}")],
        w=6,
    )
    d.timeseries(
        "Certificate expiry",
        "When the certificate served on the client port expires (TxgateTlsCertificateExpiring fires 14 "
        "days before); 1970 (0) on an instance without TLS. A reload moves it.",
        "dateTimeAsIso",
        [(f"max by (instance) (txgate_tls_certificate_expiry_timestamp_seconds{{{I}}}) * 1000",
          "{{instance}}")],
        w=6,
    )

    d.row("Aeges listener")
    d.timeseries(
        "Failure reports by result",
        "Failure reports posted by the Credible Layer sidecar per second, by what became of them.",
        "reqps",
        [(rate("txgate_aeges_reports_total", "result"), "{{result}}")],
        w=6,
    )
    d.timeseries(
        "Pool questions (VerifyTransaction) by result",
        "The sequencer pool's questions per second: allowed, denied, would_deny, invalid, refused_source, "
        "exhausted, timeout, cancelled, unimplemented.",
        "reqps",
        [(rate("txgate_aeges_verify_total", "result"), "{{result}}")],
        w=6,
    )
    d.timeseries(
        "Pool question latency p50 / p99",
        "Request head to answer, per instance. The plugin's deadline is 500 ms.",
        "s",
        [
            (f"instance:txgate_aeges_verify_duration_seconds:p50_5m{{{I}}}", "{{instance}} p50"),
            (f"instance:txgate_aeges_verify_duration_seconds:p99_5m{{{I}}}", "{{instance}} p99"),
        ],
        w=6,
    )
    d.timeseries(
        "Pool denials by reason",
        "Pool questions answered denied (or would be, monitor-only) per second, by reason.",
        "reqps",
        [(rate("txgate_aeges_verify_denials_total", "reason"), "{{reason}}")],
        w=6,
    )

    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": "txgate fleet: traffic, screening, sidecar, state, upstream, limits, Aeges listener.",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [],
        "liveNow": False,
        "panels": d.panels,
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["txgate"],
        "templating": {
            "list": [
                {
                    "current": {},
                    "hide": 0,
                    "includeAll": False,
                    "label": "Data source",
                    "multi": False,
                    "name": "datasource",
                    "options": [],
                    "query": "prometheus",
                    "refresh": 1,
                    "regex": "",
                    "skipUrlSync": False,
                    "type": "datasource",
                },
                {
                    "allValue": ".+",
                    "current": {},
                    "datasource": DS,
                    "definition": "label_values(txgate_http_responses_total, instance)",
                    "hide": 0,
                    "includeAll": True,
                    "label": "Instance",
                    "multi": True,
                    "name": "instance",
                    "options": [],
                    "query": {
                        "qryType": 1,
                        "query": "label_values(txgate_http_responses_total, instance)",
                        "refId": "PrometheusVariableQueryEditor-VariableQuery",
                    },
                    "refresh": 2,
                    "regex": "",
                    "skipUrlSync": False,
                    "sort": 1,
                    "type": "query",
                },
            ]
        },
        "time": {"from": "now-3h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": "txgate",
        "uid": "txgate",
        "version": 1,
        "weekStart": "",
    }


def main():
    text = json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
    if sys.argv[1:] == ["--check"]:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT}: out of date; run python3 {Path(__file__).name}", file=sys.stderr)
            sys.exit(1)
        return
    if sys.argv[1:]:
        print(f"usage: {sys.argv[0]} [--check]", file=sys.stderr)
        sys.exit(2)
    OUT.write_text(text)


if __name__ == "__main__":
    main()
