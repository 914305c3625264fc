"""Traffic: workload schedules, presets, traces and the application header (data, no sockets)."""
