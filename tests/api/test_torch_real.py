"""Only where a real torch with CUDA is importable (never in CI): the identity mapping and
torch's allocator figures against NVML on real hardware."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs torch with CUDA and a GPU")


def test_real_torch_job_gpus_and_track():
    import nvtopy
    from nvtopy.api import state as runtime

    runtime.reset()  # NVML
    try:
        keep = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda")  # 64 MiB and a CUDA context
        job = nvtopy.job_gpus()
        assert job.source == "torch"
        ordinal = torch.cuda.current_device()
        index = next(i for i, o in job.torch_ordinals.items() if o == ordinal)
        gpu = nvtopy.snapshot(gpus=[index]).gpus[0]
        uuid = str(torch.cuda.get_device_properties(ordinal).uuid)
        assert gpu.static.uuid.lower().endswith(uuid.lower().removeprefix("gpu-")), "matched by identity"
        with nvtopy.track("real", interval=0.02, callback=lambda r: None) as t:
            block = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            del block
        usage = next(g for g in t.report.gpus if g.index == index)
        assert usage.torch is not None and usage.torch.allocated_peak_bytes >= 1 << 30
        assert usage.process_memory_end_bytes >= usage.torch.reserved_end_bytes, "NVML counts the context too"
        del keep
    finally:
        runtime.reset()
