"""``rlhf-recipes import-verl``: see :mod:`rlhf.cli.importers.verl.verb`."""
