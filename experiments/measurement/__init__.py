"""Live measurement of a running fabric: netlink queue and link samplers, CPU, TCP's
counters, packet captures, reachability and iperf3 (the modules that need root)."""
