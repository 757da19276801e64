"""``rlhf-recipes import-verl``: see :mod:`rlhf.importers.verl.verb`."""
