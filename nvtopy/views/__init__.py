"""Non-interactive views of snapshots (JSON, text). The TUI lives in :mod:`nvtopy.tui`."""
