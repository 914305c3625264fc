"""Fidelity and cost benchmarks of the emulation (issue 8): ``python -m benchmarks``."""
