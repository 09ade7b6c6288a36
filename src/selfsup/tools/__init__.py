"""The lab's other commands: selfsup-eval, selfsup-sample, selfsup-bench and the parity check."""
