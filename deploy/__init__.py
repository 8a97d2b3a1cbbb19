"""Kubernetes wiring generated from the same config as the dashboards and alerts (see build.py)."""
