"""``python -m rlhf.models.merge_lora --base BASE --adapter ADAPTER --out OUT``: merge LoRA adapters into a base
model and write a plain Hugging Face model folder (loadable by transformers without peft)."""

from __future__ import annotations

import argparse

from rlhf.models.lora import merge_lora
from rlhf.spec.names import PRECISIONS


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
