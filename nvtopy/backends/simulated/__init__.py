"""Simulated GPUs: deterministic, seeded, with every fault the real driver shows."""
