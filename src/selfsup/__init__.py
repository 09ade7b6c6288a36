"""selfsup: a lab for comparing self-supervised pretraining objectives."""

__version__ = "0.1.0"
