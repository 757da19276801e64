"""A training backend written outside rlhf, as a user's plug-in would be (``trainer.backend=toy``): one folder
(toy_train/: this descriptor implementing rlhf.backends.contract.training.TrainBackend by delegating every call to
the DeepSpeed backend but for its checkpoints, which it lays out its own way (checkpoint.py, engine.py), and
config.py, its own keys ``trainer.toy.*``), its conf file (conf/trainer/backend/toy.yaml) and its registry line
(toy_registry.py, declared as an entry point). tests/backends/test_toy_backends.py checks that nothing else in rlhf
has to change for it to validate, plan, be an option of --auto, pass the axis's conformance checks and train a real
job. No torch at import, as the contract asks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlhf.backends.contract.training import ModelStates, SavedWeights
from rlhf.backends.train.deepspeed.descriptor import BACKEND as DEEPSPEED
from rlhf.spec.schema import ExperimentSpec


class ToyTrainBackend:
    name = "toy"

    def describe(self, spec: ExperimentSpec) -> str:
        return f"{spec.trainer.toy.label} (a plug-in over {DEEPSPEED.describe(spec)})"  # its own key, trainer.toy.label

    def mesh(self, spec: ExperimentSpec, ranks: int) -> Any:
        return DEEPSPEED.mesh(spec, ranks)

    def init_distributed(self, accelerator: str, timeout_s: float = 600.0) -> None:
        DEEPSPEED.init_distributed(accelerator, timeout_s)

    def leave(self) -> None:
        DEEPSPEED.leave()

    def build_trained(self, load: Any, spec: ExperimentSpec, *, lr: float, total_steps: int, grad_accum: int) -> Any:
        from toy_train.engine import ToyTrainEngine  # DeepSpeed's engine, saving in the toy's checkpoint layout

        return ToyTrainEngine(
            DEEPSPEED.build_trained(load, spec, lr=lr, total_steps=total_steps, grad_accum=grad_accum)
        )

    def build_frozen(self, load: Any, spec: ExperimentSpec, *, offload: bool) -> Any:
        return DEEPSPEED.build_frozen(load, spec, offload=offload)

    def trained_states(
        self, spec: ExperimentSpec, *, params: int, largest_layer: int, dp: int, trainable: int | None = None
    ) -> ModelStates:
        return DEEPSPEED.trained_states(spec, params=params, largest_layer=largest_layer, dp=dp, trainable=trainable)

    def frozen_states(
        self, spec: ExperimentSpec, *, params: int, largest_layer: int, dp: int, offload: bool
    ) -> ModelStates:
        return DEEPSPEED.frozen_states(spec, params=params, largest_layer=largest_layer, dp=dp, offload=offload)

    def gathers_on_every_rank(self, spec: ExperimentSpec) -> bool:
        return DEEPSPEED.gathers_on_every_rank(spec)

    # what the planner asks: DeepSpeed's answers, but for its own --auto label

    def shards_optimizer_states(self, spec: ExperimentSpec) -> bool:
        return DEEPSPEED.shards_optimizer_states(spec)

    def gathered_units(self, spec: ExperimentSpec) -> int:
        return DEEPSPEED.gathered_units(spec)

    def module_cost(self, constants: Any) -> Any:
        return DEEPSPEED.module_cost(constants)

    def traffic(self, spec: ExperimentSpec, net: Any, **sizes: Any) -> Any:
        return DEEPSPEED.traffic(spec, net, **sizes)

    def offloads_frozen(self, spec: ExperimentSpec) -> bool:
        return DEEPSPEED.offloads_frozen(spec)

    def auto_defaults(self) -> dict[str, Any]:
        return DEEPSPEED.auto_defaults()

    def auto_options(self, spec: ExperimentSpec, *, gpu: bool, turns: bool, lora: bool) -> list[dict[str, Any]]:
        return DEEPSPEED.auto_options(spec, gpu=gpu, turns=turns, lora=lora)

    def label(self, spec: ExperimentSpec) -> str:
        return f"{spec.trainer.toy.label} {DEEPSPEED.label(spec)}"

    def layout_keys(self, values: dict[str, Any]) -> list[str]:
        return DEEPSPEED.layout_keys(values)

    def preload_modules(self) -> tuple[str, ...]:
        return DEEPSPEED.preload_modules()

    # its rules: DeepSpeed's (its own keys, trainer.toy.*, are config.py's, named by its registry line)
    def problems(self, spec: ExperimentSpec, d: Any) -> list[tuple[str, Any, str]]:
        return DEEPSPEED.problems(spec, d)

    def weights_split(self, spec: ExperimentSpec) -> tuple[str, Any, str] | None:
        return DEEPSPEED.weights_split(spec)

    def beside_an_engine(self, spec: ExperimentSpec) -> list[tuple[str, Any, str]]:
        return DEEPSPEED.beside_an_engine(spec)

    def optimizer_bound_to_ranks(self, flat: dict[str, Any]) -> bool:
        return DEEPSPEED.optimizer_bound_to_ranks(flat)

    # its checkpoints: a layout of its own (toy_train/checkpoint.py), read by its answers alone
    def checkpoint_weights(self, folder: Path) -> SavedWeights:
        from toy_train import checkpoint

        return checkpoint.checkpoint_weights(folder)

    def checkpoint_state_dict(self, folder: Path) -> dict[str, Any]:
        from toy_train import checkpoint

        return checkpoint.checkpoint_state_dict(folder)

    def checkpoint_bound_keys(self) -> tuple[str, ...]:
        return DEEPSPEED.checkpoint_bound_keys()  # its engine's states are DeepSpeed's, laid out by the ZeRO stage


BACKEND = ToyTrainBackend()
