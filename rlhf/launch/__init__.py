"""From the spec to running processes: the pure plan, then Ray placement groups and actor groups."""
