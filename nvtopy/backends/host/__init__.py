"""This host's side of a GPU process: psutil rows, owners (container, pod, Slurm job), PID namespaces, signals."""
