"""What is wrong with a GPU, in plain words: the health layer.

Pure functions and small trackers over the model (no driver, no threads, no
Textual): the Xid catalogue (:mod:`.xid`), the Xids of the verdict's window
counted whole (:mod:`.xid_window`), throttling in words
(:mod:`.throttle`), the real-work flags that need time (:mod:`.realwork`:
idle-held processes, a suspected hang) and the one verdict per GPU
(:mod:`.verdict`). The collector calls them once per snapshot; every view
(TUI, ``--once``, JSON, CSV, the exporter, ``nvtopy doctor``) reads the same
findings, so no two views can disagree about a GPU.
"""
