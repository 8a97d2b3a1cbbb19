"""multi_lora.json (adapter name → local path) and per-request `lora_name` resolution.

Compatible with the official backend: the file is read when model.json enables LoRA, and a request names
its adapter with `lora_name` among its sampling parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import ConfigError, InvalidRequest
from .json_config import load_json_object

LORA_FILE = "multi_lora.json"


@dataclass(frozen=True)
class LoraRegistry:
    enabled: bool = False
    adapters: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, model_dir: Path, engine_config: dict[str, Any]) -> LoraRegistry:
        if str(engine_config.get("enable_lora", False)).lower() != "true":
            return cls()
        path = model_dir / LORA_FILE
        if not path.is_file():
            raise ConfigError(f"enable_lora is true in model.json but {path} does not exist")
        adapters = load_json_object(path, "adapter names to local paths")
        if not all(isinstance(v, str) for v in adapters.values()):
            raise ConfigError(f"{path}: must be a JSON object mapping adapter names to local paths")
        resolved = {
            name: str((model_dir / p).resolve()) if not Path(p).is_absolute() and (model_dir / p).exists() else p
            for name, p in adapters.items()
        }
        return cls(enabled=True, adapters=resolved)

    def check(self, name: str | None) -> None:
        """Reject a request's `lora_name` before it reaches the engine."""
        if name is None:
            return
        if not self.enabled:
            raise InvalidRequest(
                f"lora_name: {name!r} was given but LoRA is not enabled for this model "
                "(set \"enable_lora\": true in model.json and list adapters in multi_lora.json)"
            )
        if name not in self.adapters:
            raise InvalidRequest(
                f"lora_name: unknown adapter {name!r}; available: {', '.join(sorted(self.adapters)) or 'none'}"
            )

    def request_for(self, name: str | None) -> Any:
        if name is None:
            return None
        from vllm.lora.request import LoRARequest

        self.check(name)
        lora_int_id = list(self.adapters).index(name) + 1
        return LoRARequest(lora_name=name, lora_int_id=lora_int_id, lora_path=self.adapters[name])
