"""Python runs this at start-up when this folder is on PYTHONPATH: every process of a test job (the driver, Ray's
workers, the two-rank conformance processes) then holds the toy backends' registry lines, as each would with the
lines written into rlhf/spec/registry.py."""

import toy_registry

toy_registry.register()
