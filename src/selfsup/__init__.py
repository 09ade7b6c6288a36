"""selfsup: a lab for comparing self-supervised pretraining objectives."""

__version__ = "0.1.0"


def load(path, device="cpu"):
    """The model of a run dir or checkpoint, its tokenizer and settings: selfsup.interop.pretrained.load."""
    from selfsup.interop.pretrained import load as load_pretrained

    return load_pretrained(path, device)
