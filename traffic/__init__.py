"""Traffic: what the emulated hosts send, in rooms top to bottom (each imports only
those below it; docs/architecture.md):

- ``agents``: the processes that send and receive every message over real kernel
  sockets (the only sockets of the package) and the coordinator that drives them;
- ``serving``: disaggregated LLM serving as a live driver;
- ``workloads``: workload schedules (pure generators), their dependency semantics and
  a schedule replayed as a driver;
- the package's own modules: presets, the compute model, traces, profiles, the driver
  protocol, the wire format and the application header (data and pure functions).
"""
