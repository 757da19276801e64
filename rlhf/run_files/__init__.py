"""What a run leaves on disk and how it is read back, without torch: checkpoints (a step folder each, written whole
or not at all, with a manifest of sizes and checksums), and the weights a path holds (``checkpoint.init_from``: a
run folder, a checkpoint, a Hugging Face folder or LoRA adapters). The pipelines write them; the preflight and
``rlhf-run --resume`` read them before anything heavy is imported."""
