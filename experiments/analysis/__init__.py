"""Analysis of recorded tables (pure): metrics, the fidelity verdict, summary.json and
the analytic estimates printed beside the measurement."""
