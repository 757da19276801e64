"""The toy training backend's folder (``trainer.backend=toy``): descriptor.py, DeepSpeed under another name."""
