"""Accounting rules: GPU-hours held, busy and idle-held, energy and peak memory, from any source's observations."""
