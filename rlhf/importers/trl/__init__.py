"""``rlhf-recipes import-trl``: TRL command lines, launcher lines and config files into recipes."""
