"""The Grafana dashboard (packaging/kubernetes/monitoring/grafana-dashboard.json): every
panel has queries, and every metric a query or template variable names is one the exporter
serves: the names are read from a real scrape's text (the client library's generate_latest
and its parser), a histogram's and a counter's series by their sample suffixes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ocihook.metrics.collector import METRICS, NodeCollector
from tests.support.metrics import text_of

pytestmark = pytest.mark.devstack("prometheus_client")  # RHEL 9's Python stack has none

DASHBOARD = Path(__file__).resolve().parent.parent / "packaging/kubernetes/monitoring"
NAME = re.compile(r"\b(ocihook_[A-Za-z0-9_]+)\b")
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def served(tmp_path) -> set[str]:
    """Every series name the exporter can serve, from its text (empty sources: each family
    still has its HELP and TYPE)."""
    config = {"profile": {"name": "synthetic"}}
    node = NodeCollector(config, "/", str(tmp_path / "state"), str(tmp_path / "audit.log"), None)
    from prometheus_client.parser import text_string_to_metric_families

    names = set()
    for family in text_string_to_metric_families(text_of(node)):
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def test_every_query_names_served_metrics(tmp_path):
    names = served(tmp_path)
    assert {
        n.removesuffix("_total") for n in names if not n.endswith(("_sum", "_count", "_bucket"))
    } >= set(METRICS) - {"ocihook_hook_duration_seconds"}
    dashboard = json.loads((DASHBOARD / "grafana-dashboard.json").read_text())
    queries = []
    for panel in dashboard["panels"]:
        exprs = [target["expr"] for target in panel["targets"]]
        assert exprs, f"panel {panel['title']!r} has no query"
        for expr in exprs:
            assert NAME.search(expr), f"panel {panel['title']!r}: {expr!r} names no metric"
        queries += exprs
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(variable["definition"])
    used = {name for expr in queries for name in NAME.findall(expr)}
    assert used - names == set(), f"not served: {sorted(used - names)}"
    families = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used}
    assert families == set(METRICS), f"not on the dashboard: {sorted(set(METRICS) - families)}"


def test_the_check_is_real(tmp_path):
    """Control: a misspelt metric in a query is found."""
    names = served(tmp_path)
    assert "ocihook_device_healthy" in names
    assert "ocihook_device_healty" not in names
    assert "ocihook_containers_injected" not in names  # a counter is served as _total
