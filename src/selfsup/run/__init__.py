"""The selfsup-train app: the composed config's schema, checks, build, run dir, loggers, sweep, the DDP worker."""
