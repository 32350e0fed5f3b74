"""A training loop watched by nvtopy: usage lines, tracked epochs, a sampler, TensorBoard scalars.

    python examples/training_loop.py                        # real GPUs (torch on CUDA if installed)
    NVTOPY_BACKEND=simulated python examples/training_loop.py   # no GPU needed

Scalars go to ``runs/nvtopy-example`` (or the directory given as the first
argument): ``tensorboard --logdir runs``.
"""

from __future__ import annotations

import logging
import sys

import nvtopy
from nvtopy.integrations.tensorboard import TensorBoardLogger

logging.basicConfig(level=logging.INFO, format="%(message)s")


def make_step():
    """One training step: torch on the GPU when there is one, else NumPy on the CPU."""
    try:
        import torch

        if torch.cuda.is_available():
            model = torch.nn.Linear(4096, 4096).cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

            def step() -> float:
                x = torch.randn(512, 4096, device="cuda")
                loss = model(x).square().mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                return float(loss)

            return step
    except ImportError:
        pass
    import numpy as np

    rng = np.random.default_rng(0)
    weights = rng.standard_normal((256, 256)) * 0.01

    def step() -> float:
        nonlocal weights
        x = rng.standard_normal((128, 256))
        y = x @ weights
        weights -= 1e-4 * x.T @ y / len(x)
        return float((y * y).mean())

    return step


def main() -> None:
    log_dir = sys.argv[1] if len(sys.argv) > 1 else "runs/nvtopy-example"
    step = make_step()
    nvtopy.print_usage()  # one line per GPU this job uses
    tensorboard = TensorBoardLogger(log_dir=log_dir)
    with nvtopy.Sampler(interval=0.5, callbacks=[tensorboard]) as sampler:  # in the background
        for epoch in range(3):
            with nvtopy.track(f"epoch {epoch}"):  # logged at INFO when the epoch ends
                for _ in range(200):
                    step()
    tensorboard.log(step=1000)  # on demand, at a step of your choosing
    tensorboard.close()
    for index, metrics in sampler.summary().items():
        util = metrics.get("utilization_gpu_percent")
        memory = metrics.get("memory_used_percent")
        if util and memory:
            print(
                f"GPU {index}: utilisation {util.min:.0f}..{util.max:.0f}% (mean {util.mean:.0f}%), "
                f"memory {memory.mean:.0f}% over {util.samples} samples"
            )
    print(f"TensorBoard scalars written to {log_dir}")


if __name__ == "__main__":
    main()
