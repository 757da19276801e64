"""Override lists the pipeline tests share (imported by name, so each test file and subprocess finds the same)."""

# Two data-parallel ranks on the 2-core machine, gradient accumulation 2, a few steps.
TWO_RANKS = [
    "hardware.devices_per_node=2",
    "trainer.global_batch=32",
    "trainer.micro_batch_per_device=8",
    "logging.mlflow=false",
    "logging.progress=false",
]
