"""``trainer.backend=deepspeed``: ZeRO 0-3 engines.

descriptor.py        this backend as rlhf.backends.contract.training.TrainBackend (no torch import: plan and validation)
engine.py            the trained and frozen engines over deepspeed.initialize
ds_config.py         the DeepSpeed config a spec gives
deepspeed_import.py  importing DeepSpeed quietly
"""
