"""rlhf's Hydra plugins: the search path the rlhf CLIs compose with, and the ``ray_cluster`` launcher.

Found by Hydra's plugin discovery (the ``hydra_plugins`` namespace package); importing this package is cheap (no
Ray, no torch), since Hydra imports every plugin module of the environment when it starts.
"""
