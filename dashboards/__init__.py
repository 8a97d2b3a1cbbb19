"""Grafana dashboards built with grafana-foundation-sdk, and their generated JSON."""
