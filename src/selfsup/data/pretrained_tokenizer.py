"""A pretrained tokenizer (`data.tokenizer=<tokenizer.json path | Hugging Face name>`) in the lab's vocabulary layout.

The lab's objectives expect the special tokens first, in order (selfsup.data.vocab): <pad> <s> </s> <mask>
<mode_r> <mode_x> <mode_s> <extra_id_0> ... <fim_prefix> <fim_middle> <fim_suffix>. `lab_layout` renumbers a tokenizer so that they are: each role takes
the tokenizer's own token where it has one (T5's <pad>, </s> and <extra_id_N>; BERT's [PAD] [CLS] [SEP] [MASK];
GPT-2's <|endoftext|> as </s>; StarCoder's <fim_prefix> ...), the missing ones are added, and every other token keeps its place in the order
after them. Text is segmented exactly as before; only the numbers change. The tokenizer's post-processor (a
template adding [CLS]/[SEP]) is dropped: the lab puts its own special tokens where objectives need them.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from selfsup.data.sources import DataError
from selfsup.data.vocab import BASE_SPECIALS, special_tokens

# the tokenizer's own token for a role, in order of preference
OWN_NAMES = {
    "<pad>": ("<pad>", "[PAD]", "<|pad|>", "<|padding|>"),
    "<s>": ("<s>", "[CLS]", "<|startoftext|>", "<|begin_of_text|>"),
    "</s>": ("</s>", "[SEP]", "<|endoftext|>", "<|end_of_text|>"),
    "<mask>": ("<mask>", "[MASK]"),
    # fill-in-the-middle: StarCoder's and SantaCoder's names, Qwen2.5-Coder's
    "<fim_prefix>": ("<fim_prefix>", "<fim-prefix>", "<|fim_prefix|>"),
    "<fim_middle>": ("<fim_middle>", "<fim-middle>", "<|fim_middle|>"),
    "<fim_suffix>": ("<fim_suffix>", "<fim-suffix>", "<|fim_suffix|>"),
}
MODELS = ("BPE", "WordPiece", "WordLevel", "Unigram")


def is_path(spec: str) -> bool:
    """A local path rather than a hub name (`gpt2`, `google-t5/t5-small`): absolute, relative with ./ or ~, or
    deeper than a hub repository's owner/name."""
    return spec.startswith(("/", ".", "~")) or spec.count("/") > 1


def load_pretrained(spec: str, hub_cache: str | None = None) -> Tokenizer:
    """A tokenizer.json file (or a folder holding one), or the tokenizer.json of a Hugging Face hub repository
    (`gpt2`, `google-t5/t5-small`): from the hub's local cache, else downloaded (unless HF_HUB_OFFLINE=1)."""
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "tokenizer.json").is_file():
        path = path / "tokenizer.json"
    if path.is_file():
        try:
            return Tokenizer.from_file(str(path))
        except Exception as err:  # noqa: BLE001 - tokenizers raises its own Exception type
            raise DataError(
                f"data.tokenizer={spec} is not a tokenizers tokenizer.json ({str(err)[:120]}): pass the "
                f"tokenizer.json of a fast tokenizer"
            ) from None
    if path.suffix == ".json" or is_path(spec):
        raise DataError(
            f"data.tokenizer={spec} does not exist: pass a tokenizer.json file (or a hub name such as gpt2)"
        )
    # huggingface_hub is imported here, not at the top: ~0.15 s, kept out of `import selfsup.data`
    from huggingface_hub import constants, hf_hub_download

    try:
        return Tokenizer.from_file(hf_hub_download(spec, "tokenizer.json", cache_dir=hub_cache, local_files_only=True))
    except Exception:  # noqa: BLE001 - not in the local cache: download it below
        pass
    if constants.HF_HUB_OFFLINE:
        raise DataError(
            f"data.tokenizer={spec}: not in the local hub cache, and HF_HUB_OFFLINE is set: download it "
            f"once with network, or pass the path of a tokenizer.json"
        )
    try:
        return Tokenizer.from_file(hf_hub_download(spec, "tokenizer.json", cache_dir=hub_cache))
    except Exception as err:  # noqa: BLE001 - network, unknown repository, no tokenizer.json
        raise DataError(
            f"data.tokenizer={spec}: no such file, and the hub has no tokenizer.json for it or cannot be "
            f"reached ({type(err).__name__}): pass the path of a tokenizer.json"
        ) from None


def lab_layout(tokenizer: Tokenizer, n_sentinels: int, spec: str = "", fim: bool = True) -> Tokenizer:
    """The tokenizer renumbered so that the lab's special tokens come first (module docstring)."""
    data = json.loads(tokenizer.to_str())
    model = data["model"]
    if model.get("type") not in MODELS:
        raise DataError(
            f"data.tokenizer={spec}: a {model.get('type')} model, which the lab cannot renumber: use a "
            f"{', '.join(MODELS)} tokenizer"
        )
    unigram = model["type"] == "Unigram"
    pieces = (
        {i: piece for i, (piece, _) in enumerate(model["vocab"])}
        if unigram
        else {i: token for token, i in model["vocab"].items()}
    )
    added = {t["id"]: t for t in data.get("added_tokens", [])}
    names = {**pieces, **{i: t["content"] for i, t in added.items()}}
    by_name = {name: i for i, name in sorted(names.items(), reverse=True)}  # the lowest id of a name
    own_sentinels = sum(1 for name in by_name if name.startswith("<extra_id_") and name[10:-1].isdigit())
    if 0 < own_sentinels < n_sentinels:
        raise DataError(
            f"data.tokenizer={spec} has {own_sentinels} sentinels (<extra_id_0> ...), data.n_sentinels="
            f"{n_sentinels} needs more than it has room for: set data.n_sentinels={own_sentinels} or fewer"
        )
    roles, taken = [], set()
    for role in special_tokens(n_sentinels, fim):
        candidates = OWN_NAMES.get(role, (role,)) if role not in BASE_SPECIALS[4:] else (role,)
        own = next((by_name[c] for c in candidates if c in by_name and by_name[c] not in taken), None)
        if own is not None:
            taken.add(own)
        roles.append((role, own))
    new_id, next_id = {}, len(roles)
    for old in sorted(names):
        if old not in taken:
            new_id[old] = next_id
            next_id += 1
    for i, (_, own) in enumerate(roles):
        if own is not None:
            new_id[own] = i
    content = {i: (names[own] if own is not None else role) for i, (role, own) in enumerate(roles)}
    if unigram:  # ids are list positions: the tokens the model did not have become pieces it never picks
        scores = {i: score for i, (_, score) in enumerate(model["vocab"])}
        never = min(scores.values(), default=0.0) - 1000.0
        vocab = [None] * next_id
        for old, piece in pieces.items():
            vocab[new_id[old]] = [piece, scores[old]]
        for i in range(len(roles)):
            if vocab[i] is None:
                vocab[i] = [content[i], never]
        for old in added:
            if vocab[new_id[old]] is None:
                vocab[new_id[old]] = [names[old], never]
        model["vocab"] = vocab
        if model.get("unk_id") is not None:
            model["unk_id"] = new_id[model["unk_id"]]
    else:  # the roles enter the model's vocabulary too: that is what pins an added token's id when it is loaded
        # (BPE only makes a token from its merges, which never make these; WordLevel would match one written as a
        # word in the text)
        model["vocab"] = {**{names[old]: new_id[old] for old in pieces}, **{content[i]: i for i in range(len(roles))}}
    tokens = []
    for old, token in added.items():
        tokens.append({**token, "id": new_id[old], **({"special": True} if new_id[old] < len(roles) else {})})
    present = {t["id"] for t in tokens}
    for i in range(len(roles)):
        if i not in present:
            tokens.append(
                {
                    "id": i,
                    "content": content[i],
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": True,
                }
            )
    data["added_tokens"] = sorted(tokens, key=lambda t: t["id"])
    data["post_processor"] = None
    data["padding"] = data["truncation"] = None
    return Tokenizer.from_str(json.dumps(data))
