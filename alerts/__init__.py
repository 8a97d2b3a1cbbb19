"""Prometheus and Grafana-managed alert rules, and their promtool tests."""
