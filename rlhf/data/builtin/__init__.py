"""Small datasets shipped with the package (builtin:NAME); regenerate with make_builtin.py."""
