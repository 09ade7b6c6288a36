"""Reliability pieces for long runs, each small and standing alone; import them from their modules:

- checkpoints.py: `AtomicCheckpointIO` (a Trainer checkpoint IO: temp file, fsync, rename; loads with
  `torch.load(weights_only=True)`), `load_checkpoint_safely`, and `resume_fingerprint` /
  `check_resume_compatible`, which refuse a checkpoint of another objective, architecture, data or seed.
- callbacks.py: `LastCheckpoint` (last.ckpt every N steps, never with non-finite weights), `NonFiniteGuard`
  (stop or skip a step whose loss or gradients are not finite), `PreemptionHandler` (SIGTERM / SIGUSR1:
  a checkpoint at the next step, then a clean stop).
- run_dir.py: `RunDirGuard` (a Hydra callback: the run dir checked and locked before anything is written;
  resume refusals), `resumed_config`, `requeue_checkpoint`.
- redact.py: `redact` (secrets out of what W&B records), `register_secrets`, `rss_mb`.
"""
