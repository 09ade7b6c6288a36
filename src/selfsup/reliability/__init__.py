"""Reliability pieces for long runs, each small and standing alone; import them from their modules:

- checkpoints.py: `load_checkpoint_safely` (`torch.load(weights_only=True)`, one-line errors), and
  `resume_fingerprint` / `check_resume_compatible`, which refuse a checkpoint of another objective,
  architecture, data or seed. It does not import Lightning.
- checkpoint_io.py: `AtomicCheckpointIO` (a Trainer checkpoint IO: temp file, fsync, rename; loads with
  `load_checkpoint_safely`).
- errors.py: the checkpoint errors and `NonFiniteLossError`.
- callbacks.py: `LastCheckpoint` (last.ckpt every N steps, never with non-finite weights), `NonFiniteGuard`
  (stop or skip a step whose loss or gradients are not finite), `PreemptionHandler` (SIGTERM / SIGUSR1:
  a checkpoint at the next step, then a clean stop).
- redact.py: `redact` (secrets out of what W&B records), `register_secrets`.
"""
