"""Orchestration: a run's configuration planned, fitted to the machine's envelope, built, run
and torn down; the run lock, stop flag, fault injection and the reference runs."""
