"""Coming from another framework: OpenRLHF's reward/agent imports resolved to ours (:mod:`rlhf.compat.openrlhf`)
and OpenRLHF command lines converted into recipes (:mod:`rlhf.compat.openrlhf_cli`)."""
