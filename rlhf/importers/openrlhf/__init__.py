"""``rlhf-recipes import-openrlhf``: see :mod:`rlhf.importers.openrlhf.verb`."""
