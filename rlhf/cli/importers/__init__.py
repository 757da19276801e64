"""``rlhf-recipes import-openrlhf`` (and the other ``import-*`` verbs): another framework's training command line,
or a shell script running one, becomes a recipe and a report on every flag.

It lives under cli/ because it is a verb's implementation: it composes, validates and plans what it writes
(rlhf.cli.common, rlhf.planning.plan), so it sits above launch/ in the direction of imports. The runtime fallback for
OpenRLHF's ``import openrlhf...`` in user files is a different product and stays in :mod:`rlhf.compat`.

    shell.py     enough of bash to read a training script without running it
    openrlhf/    OpenRLHF's flag vocabularies (flat and dotted), their meaning here, the recipe and the report
"""
