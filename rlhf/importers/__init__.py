"""``rlhf-recipes import-openrlhf`` (and the other ``import-*`` verbs): another framework's training command line,
or a shell script running one, becomes a recipe and a report on every flag.

A package of its own, imported by cli alone: each importer maps another framework's words onto the spec and the
shipped conf/ options and builds the recipe (composing and planning it through the spec and rlhf.planning); writing
it and ``--check`` are the verb's (rlhf.cli.import_recipe). The runtime fallback for OpenRLHF's
``import openrlhf...`` in user files is a different product and stays in :mod:`rlhf.compat`.

    shell.py     enough of bash to read a training script without running it
    openrlhf/    OpenRLHF's flag vocabularies (flat and dotted), their meaning here, the recipe and the report
"""
