#!/usr/bin/env bash
# /generate and /generate_stream with curl, and a LoRA adapter chosen per request.
#   samples/clients/curl.sh [host:port] [model] [lora model] [adapter]
set -euo pipefail
URL="${1:-localhost:8000}"
MODEL="${2:-vllm_model}"
LORA_MODEL="${3:-}"
ADAPTER="${4:-}"

# One response with the whole text (the prompt first, unless exclude_input_in_output is true).
curl -sf -X POST "$URL/v2/models/$MODEL/generate" \
     -d '{"text_input": "What is Triton?", "parameters": {"stream": false, "max_tokens": 16}}'
echo
# Server-sent events: one `data: {...}` line per engine step.
curl -sf -N -X POST "$URL/v2/models/$MODEL/generate_stream" \
     -d '{"text_input": "What is Triton?", "parameters": {"stream": true, "max_tokens": 16}}'
if [ -n "$LORA_MODEL" ]; then
  # A LoRA adapter from the model's multi_lora.json, by name.
  curl -sf -X POST "$URL/v2/models/$LORA_MODEL/generate" \
       -d "{\"text_input\": \"What is Triton?\", \"parameters\": {\"max_tokens\": 16, \"lora_name\": \"$ADAPTER\"}}"
  echo
fi
