"""Training with Lightning: the module with the one shared step, console, throughput, strategies, distributed, tuning."""
