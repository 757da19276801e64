"""Training backends (``trainer.backend``), one folder each: deepspeed/, fsdp2/."""
