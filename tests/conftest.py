"""Test-wide set-up: helpers shared by test folders (tests/sockets_helper.py) are importable from every test."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
