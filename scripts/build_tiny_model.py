"""Build the tiny default model: a seeded random-weight Llama with a tokenizer trained on local text.

    build_tiny_model.py TARGET            the tiny model (≈ 3.5 M parameters), and `TARGET-lora`, a LoRA adapter for
                                          it (used by the LoRA tests and the multi-LoRA example)
    build_tiny_model.py TARGET --size 1b  a ≈ 1 B-parameter Llama (Llama 3.2 1B's shape) with the same tokenizer,
                                          in bf16: an engine step of a realistic model, for make bench on a GPU

No weights can be downloaded where this project is developed and tested, so the default model is made
here. Its output is gibberish, but tokenization, batching, streaming and every metric are real.
The result is deterministic for a given Python standard library (the tokenizer's training text).
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

VOCAB_SIZE = 4096
MAX_MODEL_LEN = 1024
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]


def training_files() -> list[str]:
    """The standard library's top-level modules, sorted: local, stable text with real code tokens."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [str(p) for p in sorted(stdlib.glob("*.py"))]


def build_tokenizer(out: Path) -> None:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train(training_files(), vocab_size=VOCAB_SIZE, min_frequency=2,
              special_tokens=SPECIAL_TOKENS, show_progress=False)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="<pad>", model_max_length=MAX_MODEL_LEN,
    )
    fast.save_pretrained(out)


# Each size's shape and the dtype its weights are stored in.
SIZES = {
    "tiny": ({"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 4}, "float32"),
    "1b": ({"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
            "num_key_value_heads": 8}, "bfloat16"),
}


def build_weights(out: Path, size: str = "tiny") -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shape, dtype = SIZES[size]
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE, max_position_embeddings=MAX_MODEL_LEN, bos_token_id=1, eos_token_id=2,
        pad_token_id=3, tie_word_embeddings=False, torch_dtype=dtype, **shape,
    )
    torch.set_default_dtype(getattr(torch, dtype))  # initialise in the stored dtype: half the memory for 1b
    model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model.save_pretrained(out, safe_serialization=True)


def build_lora_adapter(out: Path, rank: int = 8) -> None:
    """A PEFT-format LoRA adapter for the tiny model (q_proj and v_proj), seeded, so LoRA requests are real."""
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(1)
    hidden, layers = 256, 2
    tensors = {}
    for layer in range(layers):
        for proj in ("q_proj", "v_proj"):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden) * 0.1
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(hidden, rank) * 0.1
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps({
        "base_model_name_or_path": "tiny-llama", "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank,
        "lora_alpha": 2 * rank, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "modules_to_save": None,
    }, indent=2))


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    args = parser.parse_args(argv)
    out = Path(args.target)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    build_tokenizer(tmp)
    build_weights(tmp, args.size)
    if args.size == "tiny":
        build_lora_adapter(tmp.parent / (out.name + "-lora"))
    (tmp / "BUILD_INFO.json").write_text(json.dumps(
        {"python": sys.version.split()[0], "vocab_size": VOCAB_SIZE, "seed": 0, "size": args.size}, indent=2))
    if out.exists():
        import shutil
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"{args.size} model written to {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
