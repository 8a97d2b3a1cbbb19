"""PromQL as syntax trees (promql-parser, Prometheus' own grammar) for the dashboard and alert checks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import promql_parser

# Grafana's `$__rate_interval` is not PromQL: it is parsed as this (otherwise unused) duration.
RATE_INTERVAL = timedelta(seconds=4321)


def parse(expr: str) -> Any:
    return promql_parser.parse(expr.replace("$__rate_interval", f"{RATE_INTERVAL.seconds}s"))


def children(node: Any) -> list[Any]:
    if isinstance(node, promql_parser.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, promql_parser.Call):
        return list(node.args)
    if isinstance(node, promql_parser.AggregateExpr):
        return [n for n in (node.param, node.expr) if n is not None]
    if isinstance(node, promql_parser.MatrixSelector):
        return [node.vector_selector]
    if isinstance(node, (promql_parser.ParenExpr, promql_parser.UnaryExpr, promql_parser.SubqueryExpr)):
        return [node.expr]
    return []


def walk(node: Any, parents: tuple[Any, ...] = ()) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """Every node with its ancestors (nearest last)."""
    yield node, parents
    for child in children(node):
        yield from walk(child, (*parents, node))


def unwrap(node: Any) -> Any:
    while isinstance(node, promql_parser.ParenExpr):
        node = node.expr
    return node


def metric_names(expr: str) -> set[str]:
    return {n.name for n, _ in walk(parse(expr)) if isinstance(n, promql_parser.VectorSelector) and n.name}


def is_call(node: Any, *functions: str) -> bool:
    return isinstance(node, promql_parser.Call) and node.func.name in functions
