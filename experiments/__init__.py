"""kvfabric experiments: specs, runner, samplers, fidelity monitor, metrics, results, report."""
