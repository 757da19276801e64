"""The schema's sections, one module per group of top-level sections (rlhf.spec.schema assembles them into
ExperimentSpec and exports every class): algorithm, model, placement, rollout, hardware, trainer, data, roles (reward,
critic, reference, teacher), run (eval, checkpoint, SFT warm-up, agent), tracking (logging) and launch (launch, Ray,
sweep). ``trainer`` and ``rollout`` get one sub-section per registered backend with keys of its own
(rlhf.spec.sections.backends). Imports nothing heavy: composing, validating and planning run without torch.
"""
