"""Fidelity and cost benchmarks of the emulation, each against its alternative in the same
run: ``kvfabric bench`` (or ``python -m benchmarks``)."""
