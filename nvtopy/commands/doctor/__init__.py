"""``nvtopy doctor``: its checks and ``--against-nvidia-smi``.

One module per job: :mod:`.command` (the options and the run), :mod:`.checks`
(every check, in the order printed), :mod:`.driver` (the driver answers, it
sees GPUs), :mod:`.environment` (this machine's setup: CUDA_VISIBLE_DEVICES,
Python bindings, PID namespace, ``/proc``), :mod:`.gpus` (each GPU's state; its
memory and PCIe link on the monitor's health rules), :mod:`.findings` (what a
check returns), :mod:`.output` (text and JSON), :mod:`.against_smi` (nvtopy's
figures beside nvidia-smi's).
"""
