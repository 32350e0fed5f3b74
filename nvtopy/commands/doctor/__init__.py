"""``nvtopy doctor``: its checks and ``--against-nvidia-smi``."""
