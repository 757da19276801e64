"""The typed experiment spec: schema, Hydra registration, derived values and validation.

Usage::

    cfg = compose(...)                 # Hydra DictConfig, validated against rlhf.spec.schema on composition
    spec = build(cfg)                  # frozen ExperimentSpec
    check(spec)                        # raises SpecInvalid listing every problem
    derived = derive(spec)             # roles, devices, gradient accumulation, ...
"""

from rlhf.spec.build import build
from rlhf.spec.derive import Derived, derive
from rlhf.spec.schema import ExperimentSpec
from rlhf.spec.validate import SpecError, SpecInvalid, check, validate

__all__ = ["Derived", "ExperimentSpec", "SpecError", "SpecInvalid", "build", "check", "derive", "validate"]
