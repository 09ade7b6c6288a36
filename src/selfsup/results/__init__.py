"""A run's results: the summary.json record and the results table, and the verdict over runs."""
