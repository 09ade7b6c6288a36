"""The lab and the outside world: export to transformers, import from it, pretrained runs, lm-evaluation-harness."""
