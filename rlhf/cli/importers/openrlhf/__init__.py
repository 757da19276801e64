"""``rlhf-recipes import-openrlhf``: see :mod:`rlhf.cli.importers.openrlhf.verb`."""
