"""NVIDIA's driver through nvidia-ml-py: the real backend, its event wait, GPM and health reads."""
