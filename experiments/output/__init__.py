"""Output: the results directory of a run, report.md, plots and the timeline."""
