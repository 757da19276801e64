"""``python -m rlhf.models.merge_lora --base BASE --adapter ADAPTER --out OUT``: merge LoRA adapters into a base
model and write a plain Hugging Face model folder (loadable by transformers without peft)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlhf.spec.names import PRECISIONS


def merge_lora(base: str, adapter: str, out: str, *, precision: str = "fp32", value_head: bool = False) -> Path:
    """Merge the adapters saved in ``adapter`` into the model at ``base``; write a plain HF model (with the adapter
    folder's tokenizer, else the base's) to ``out``."""
    import torch
    from peft import PeftModel

    from rlhf.atomic_save import atomic_dir, tensors_bytes
    from rlhf.models.loading import load_tokenizer, quiet_transformers, torch_dtype

    quiet_transformers()
    dtype = torch_dtype(precision)
    if value_head:
        from rlhf.models.value_head import load_value_model

        model = load_value_model(base, "reward", precision=precision)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    with torch.no_grad():
        merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    out_path = Path(out)
    tok_src = adapter if (Path(adapter) / "tokenizer_config.json").is_file() else base
    need = tensors_bytes(merged.state_dict())
    with atomic_dir(out_path, need_bytes=need, what="the merged model") as tmp:  # complete or absent
        merged.save_pretrained(tmp)
        load_tokenizer(tok_src).save_pretrained(tmp)
    return out_path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m rlhf.models.merge_lora", description=__doc__)
    p.add_argument("--base", required=True, help="base model folder (or hub name)")
    p.add_argument("--adapter", required=True, help="folder with adapter_config.json and the adapter weights")
    p.add_argument("--out", required=True, help="output folder for the merged model")
    p.add_argument("--precision", default="fp32", choices=PRECISIONS)
    p.add_argument("--value-head", action="store_true", help="the model is a reward/critic model with a value head")
    args = p.parse_args(argv)
    out = merge_lora(args.base, args.adapter, args.out, precision=args.precision, value_head=args.value_head)
    print(f"merged model written to {out}")


if __name__ == "__main__":
    main()
