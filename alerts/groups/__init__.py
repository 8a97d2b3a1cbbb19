"""The alert groups, one module each, composed in one list (like kubernetes-mixin's one file per alert group).

Each module declares its own thresholds (a frozen `Thresholds` dataclass, replaceable through
`Config.group_thresholds`) and reads the shared ones — the selector, the SLOs, what the dashboards draw too — from
`observability.config.Config`; the renderers take the composed list. Adding an alert is one entry in one module,
with its thresholds beside it; adding a group is one module and one line here.
"""

from __future__ import annotations

from alerts.definitions import Alert, RecordingRule
from alerts.groups import engine_health, errors, metrics_path, saturation, scrape, slo
from observability.config import Config

# In the order of the rule files and the runbook.
GROUPS = (engine_health, scrape, errors, saturation, metrics_path, slo)


def alerts(config: Config) -> list[Alert]:
    return [alert for group in GROUPS for alert in group.alerts(config)]


def recording_rules(config: Config) -> list[RecordingRule]:
    return slo.recording_rules(config)
