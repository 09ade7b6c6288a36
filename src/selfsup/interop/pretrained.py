"""A trained model out of the lab: `selfsup.load(run_dir | checkpoint)` and what it can predict.

    import selfsup
    p = selfsup.load("outputs/<date>/<time>")            # the run's best checkpoint (else last.ckpt)
    p.generate("The module", max_new_tokens=20)          # decoders: a continuation (a prefix-LM decoder reads
                                                          # the prompt as its bidirectional prefix, as trained)
    p.fill_masks("The <mask> of a module")                # encoders: top-k tokens per <mask>
    p.fill_spans("The <extra_id_0> of a module")          # encoder-decoders: the text of each sentinel

A checkpoint holds what it needs (weights, the objective/architecture/data settings, the tokenizer), and
a run dir also keeps `tokenizer.json`, so either loads on another machine.
"""

from __future__ import annotations

import math
import numbers
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from selfsup.common.names import CHECKPOINTS, DECODER, ENCODER, ENCODER_DECODER, LAST_CHECKPOINT, TOKENIZER
from selfsup.data.tokenizer import vocab_from_tokenizer
from selfsup.data.vocab import Vocab
from selfsup.errors import UserError
from selfsup.models import TransformerConfig, TransformerModel
from selfsup.reliability.checkpoints import load_checkpoint_safely

SPECIAL = re.compile(r"\s+(<mask>|<extra_id_\d+>)")  # a special token takes the space before it (as in training)
PREFIX_OBJECTIVES = ("prefix_lm", "ul2")  # objectives that train a decoder with a bidirectional prefix
REWRITE_OBJECTIVES = ("bart",)  # objectives that train an encoder-decoder to write the whole text back
MIDDLE_OBJECTIVES = ("fim",)  # objectives that train a decoder to write a middle after <fim_prefix> ... <fim_middle>


def check_generation_settings(
    max_new_tokens: int = 0, temperature: float = 0.0, top_k: int | None = None, flags: bool = False
) -> None:
    """Refuse settings generation cannot use (UserError, one line): max_new_tokens < 0, a negative or
    non-finite temperature (0 is greedy), top_k < 0 (0 or None: every token). `flags`: name them as
    selfsup-sample's options (--max-new-tokens) rather than as arguments (max_new_tokens=)."""

    def name(arg: str, value) -> str:
        return f"--{arg.replace('_', '-')} {value}" if flags else f"{arg}={value}"

    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 0:
        raise UserError(f"{name('max_new_tokens', max_new_tokens)} is not a number of tokens: use 0 or more")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, numbers.Real)
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise UserError(
            f"{name('temperature', temperature)} is not a temperature: use 0 (greedy) or a "
            f"positive finite number (1 samples the model's distribution)"
        )
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 0):
        raise UserError(
            f"{name('top_k', top_k)} is not a number of tokens: use k >= 1 to sample from the k "
            f"likeliest tokens, or 0 for every token"
        )


def run_checkpoint(run_dir: Path) -> Path:
    """A run's best checkpoint (lowest val loss; the newest if several), else its last.ckpt."""
    folder = run_dir / CHECKPOINTS
    best = sorted(folder.glob("best-*.ckpt"), key=lambda p: p.stat().st_mtime)
    if best:
        return best[-1]
    if (run_dir / LAST_CHECKPOINT).is_file():
        return run_dir / LAST_CHECKPOINT
    raise UserError(
        f"{run_dir} holds no weights (no checkpoints/*.ckpt): pass a run dir that trained past its "
        f"first checkpoint, or a .ckpt file"
    )


@dataclass
class Pretrained:
    """A loaded model (eval mode), its tokenizer and vocabulary layout, and the settings it was trained with
    (`config`: objective, architecture, data, seed)."""

    model: TransformerModel
    tokenizer: Tokenizer
    vocab: Vocab
    config: dict
    checkpoint: Path

    @property
    def architecture(self) -> str:
        return self.model.arch

    @property
    def prefix_lm(self) -> bool:
        """A decoder trained with a bidirectional prefix (objective prefix_lm): generate reads the prompt as
        that prefix and writes the rest causally, as in training."""
        objective = (self.config.get("objective") or {}).get("name")
        return self.architecture == DECODER and objective in PREFIX_OBJECTIVES

    @property
    def rewrites(self) -> bool:
        """An encoder-decoder trained to write the whole original text back (objective bart): `reconstruct` is
        what it does; `fill_spans` is span corruption's."""
        objective = (self.config.get("objective") or {}).get("name")
        return self.architecture == ENCODER_DECODER and objective in REWRITE_OBJECTIVES

    @property
    def fills_middle(self) -> bool:
        """A decoder trained to fill in the middle (objective fim): `fill_middle` is what it does, and generate
        continues a prompt in its layout, `<fim_prefix>prefix<fim_suffix>suffix<fim_middle>`, with the middle."""
        objective = (self.config.get("objective") or {}).get("name")
        return self.architecture == DECODER and objective in MIDDLE_OBJECTIVES and self.vocab.fim

    @property
    def device(self) -> torch.device:
        return self.model.tok_emb.weight.device

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(SPECIAL.sub(r"\1", text)).ids

    def decode(self, ids) -> str:
        """Text of ids, with the space a first word-start token carries (the tokenizer strips it)."""
        ids = [int(i) for i in ids]
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        first = self.tokenizer.id_to_token(ids[0]) if ids else None
        return " " + text if first and first.startswith("\u0120") and not text.startswith(" ") else text

    def _ids(self, ids: list[int]) -> torch.Tensor:
        if len(ids) > self.model.max_len:
            raise UserError(f"the text is {len(ids)} tokens, the model takes at most {self.model.max_len}")
        return torch.tensor([ids], dtype=torch.long, device=self.device)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.head(hidden)[..., : self.vocab.size].float()

    def _needs(self, architecture: str, what: str) -> None:
        if self.architecture != architecture:
            raise UserError(f"{what} needs a model of architecture {architecture}; this one is {self.architecture}")

    def _pick(self, logits: torch.Tensor, temperature: float, top_k: int | None, generator) -> int:
        logits = logits.clone()
        logits[: self.vocab.first_ordinary] = float("-inf")  # text, not special tokens
        if temperature <= 0:
            return int(logits.argmax())
        if top_k:
            kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
            logits[logits < kth] = float("-inf")
        probs = torch.softmax(logits / temperature, dim=-1)
        return int(torch.multinomial(probs.cpu(), 1, generator=generator))

    def generation_limit(self, text: str) -> int:
        """The most tokens the model can write after `text` with the positions it has: a decoder, its
        max_len less the prompt's tokens (it reads an end of document, the prompt, then what it wrote, all
        but the last token); an encoder-decoder, its decoder's max_len (a start token, then what it wrote).
        A text the model cannot read in its positions is refused (UserError)."""
        if self.architecture == DECODER:
            prompt_ids = self.encode(text)
            self._decoder_inputs(prompt_ids)
            return self.model.max_len - len(prompt_ids)
        self._needs(ENCODER_DECODER, "generation_limit (what generate and fill_spans can write)")
        self._ids([*self.encode(text), self.vocab.eos_id])  # the encoder's input
        return self.model.max_len

    def limit_note(self, text: str, max_new_tokens: int, flags: bool = False) -> str | None:
        """None if max_new_tokens fits the model's positions (generation_limit), else the note saying it
        is capped there (`flags`: as selfsup-sample's --max-new-tokens)."""
        limit = self.generation_limit(text)
        if max_new_tokens <= limit:
            return None
        asked = f"--max-new-tokens {max_new_tokens}" if flags else f"max_new_tokens={max_new_tokens}"
        if self.architecture == DECODER:
            where = f"the model has {self.model.max_len} positions and the prompt takes {self.model.max_len - limit}"
        else:
            where = f"the decoder has {self.model.max_len} positions"
        return f"{asked} is more than the model can write: {where}, so it writes at most {limit} tokens"

    def _capped(self, text: str, max_new_tokens: int) -> int:
        note = self.limit_note(text, max_new_tokens)
        if note:
            warnings.warn(note, UserWarning, stacklevel=4)  # the caller of generate (under no_grad's wrapper)
            return self.generation_limit(text)
        return max_new_tokens

    def _decoder_inputs(self, prompt_ids: list[int]) -> list[int]:
        """What a decoder reads for a prompt: an end of document, then the prompt (documents follow an end
        of document in training); refused when that does not fit its positions."""
        ids = [self.vocab.eos_id, *prompt_ids]
        if len(ids) > self.model.max_len:
            raise UserError(
                f"the prompt is {len(prompt_ids)} tokens; the model reads an end-of-document token "
                f"and the prompt in its {self.model.max_len} positions: shorten the prompt to at "
                f"most {self.model.max_len - 1} tokens"
            )
        return ids

    def _next_logits(self, ids: list[int], prefix_length: int | None) -> torch.Tensor:
        hidden = self.model(decoder_inputs=self._ids(ids), prefix_length=prefix_length)
        return self._logits(hidden[0, -1])

    @torch.no_grad()
    def next_token_logits(self, prompt: str) -> torch.Tensor:
        """Decoders: the logits [vocab size] of the token after prompt, those generate picks its first token
        from (a prefix-LM decoder reads the prompt as its bidirectional prefix)."""
        self._needs(DECODER, "next_token_logits")
        ids = self._decoder_inputs(self.encode(prompt))
        return self._next_logits(ids, len(ids) if self.prefix_lm else None)

    @torch.no_grad()
    def generate(
        self, prompt: str, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None, seed: int = 0
    ) -> str:
        """Decoders: the continuation of prompt (greedy at temperature 0, else sampled, from the top_k
        tokens if given; top_k 0 or None: every token), stopping at the end of a document.

        A prefix-LM decoder (`prefix_lm`) reads the prompt as its bidirectional prefix and writes the rest
        causally, as it was trained. max_new_tokens beyond the model's positions (generation_limit) is capped
        there, with a warning (as Hugging Face's generate stops at max_position_embeddings)."""
        self._needs(DECODER, "generate")
        check_generation_settings(max_new_tokens, temperature, top_k)
        prompt_ids = self.encode(prompt)
        ids = self._decoder_inputs(prompt_ids)
        max_new_tokens = self._capped(prompt, max_new_tokens)
        prefix_length = len(ids) if self.prefix_lm else None  # the prompt (after its end of document)
        generator = torch.Generator().manual_seed(seed)
        new: list[int] = []
        for _ in range(max_new_tokens):
            logits = self._next_logits(ids, prefix_length)
            if int(logits.argmax()) == self.vocab.eos_id and temperature <= 0:
                break
            token = self._pick(logits, temperature, top_k, generator)
            ids.append(token)
            new.append(token)
        before, after = self.decode(prompt_ids), self.decode(prompt_ids + new)
        return after[len(before) :] if after.startswith(before) else self.decode(new)

    def fill_middle(self, prefix: str, suffix: str, max_new_tokens: int = 32) -> str:
        """Decoders trained with objective fim: the middle written, greedy, between prefix and suffix (PSM's layout,
        `<fim_prefix>prefix<fim_suffix>suffix<fim_middle>`), up to an end of document or max_new_tokens."""
        if not self.fills_middle:
            objective = (self.config.get("objective") or {}).get("name")
            raise UserError(
                f"fill_middle needs a decoder trained with objective=fim; this one is a {self.architecture} "
                f"trained with objective={objective}"
            )
        return self.generate(f"<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>", max_new_tokens)

    @torch.no_grad()
    def fill_masks(self, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
        """Encoders: for each <mask> in text, the top_k tokens and their probabilities."""
        self._needs(ENCODER, "fill_masks")
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
            raise UserError(f"top_k={top_k} is not a number of tokens to show per <mask>: use 1 or more")
        ids = self.encode(text)
        where = [i for i, t in enumerate(ids) if t == self.vocab.mask_id]
        if not where:
            raise UserError("fill_masks: put <mask> where the model should fill in a token, e.g. 'The <mask> of'")
        logits = self._logits(self.model(encoder_inputs=self._ids(ids))[0, where])
        logits[:, : self.vocab.first_ordinary] = float("-inf")
        probs = torch.softmax(logits, dim=-1)
        top = torch.topk(probs, min(top_k, probs.shape[-1]), dim=-1)
        return [
            [(self.decode([i]), float(p)) for p, i in zip(row_p, row_i)]
            for row_p, row_i in zip(top.values.tolist(), top.indices.tolist())
        ]

    @torch.no_grad()
    def reconstruct(self, text: str, max_new_tokens: int = 32) -> str:
        """Encoder-decoders: the text the decoder writes back for text, greedy, as BART trained it to (a <mask> in
        text stands for missing words, any number of them). max_new_tokens beyond the decoder's positions
        (generation_limit) is capped there, with a warning."""
        self._needs(ENCODER_DECODER, "reconstruct")
        check_generation_settings(max_new_tokens)
        return self.decode(self._write(self.encode(text), self._capped(text, max_new_tokens)))

    @torch.no_grad()
    def fill_spans(self, text: str, max_new_tokens: int = 32) -> dict[str, str]:
        """Encoder-decoders: the text the decoder writes for each sentinel (<extra_id_0>, ...) of text,
        greedy, as span corruption trained it to. max_new_tokens beyond the decoder's positions
        (generation_limit) is capped there, with a warning."""
        self._needs(ENCODER_DECODER, "fill_spans")
        check_generation_settings(max_new_tokens)
        ids = self.encode(text)
        sentinels = [t for t in ids if self.vocab.sentinel_start <= t < self.vocab.sentinel_end]
        if not sentinels:
            raise UserError(
                "fill_spans: put <extra_id_0>, <extra_id_1>, ... where spans are missing, e.g. 'The <extra_id_0> of'"
            )
        written = self._write(ids, self._capped(text, max_new_tokens), also=sentinels)
        spans: dict[int, list[int]] = {s: [] for s in sentinels}
        current = None
        for token in written:
            if token in spans:
                current = token
            elif current is not None:
                spans[current].append(token)
        return {self.decode([s]): self.decode(span) for s, span in spans.items()}

    def _write(self, ids: list[int], max_new_tokens: int, also: list[int] | tuple[int, ...] = ()) -> list[int]:
        """Encoder-decoders: what the decoder writes, greedy, for the encoder's ids (then </s>): ordinary tokens
        and `also`, up to </s> or max_new_tokens."""
        encoder_inputs = self._ids([*ids, self.vocab.eos_id])
        out = [self.vocab.bos_id]
        for _ in range(max_new_tokens):
            logits = self._logits(self.model(encoder_inputs=encoder_inputs, decoder_inputs=self._ids(out))[0, -1])
            allowed = torch.full_like(logits, float("-inf"))
            allowed[self.vocab.first_ordinary :] = 0
            allowed[list(also)] = 0
            allowed[self.vocab.eos_id] = 0
            token = int((logits + allowed).argmax())
            if token == self.vocab.eos_id:
                break
            out.append(token)
        return out[1:]


def _state_dict(checkpoint: dict, path: Path) -> dict:
    weights = checkpoint.get("state_dict")
    if not isinstance(weights, dict) or not any(k.startswith("model.") for k in weights):
        raise UserError(
            f"{path} is not a selfsup checkpoint (no model weights under state_dict): pass a .ckpt "
            f"written by selfsup-train, or its run dir"
        )
    return {k.removeprefix("model."): v for k, v in weights.items() if k.startswith("model.")}


def load(path: str | Path, device: str | torch.device = "cpu") -> Pretrained:
    """The model of a run dir (its best checkpoint, else last.ckpt) or of a checkpoint file, ready for
    inference on `device`: weights, tokenizer and the settings it was trained with."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} does not exist: pass a run dir (outputs/<date>/<time>) or a .ckpt file")
    run_dir = path if path.is_dir() else path.parent.parent
    checkpoint_path = run_checkpoint(path) if path.is_dir() else path
    checkpoint = load_checkpoint_safely(checkpoint_path, map_location="cpu")
    weights = _state_dict(checkpoint, checkpoint_path)
    record = checkpoint.get("selfsup") or {}
    config = record.get("config")
    if not isinstance(config, dict) or "architecture" not in config:
        raise UserError(
            f"{checkpoint_path} records no architecture settings (written before selfsup kept them): "
            f"it cannot be rebuilt here"
        )
    if record.get("tokenizer"):
        tokenizer = Tokenizer.from_str(record["tokenizer"])
    elif (run_dir / TOKENIZER).is_file():
        tokenizer = Tokenizer.from_file(str(run_dir / TOKENIZER))
    else:
        raise UserError(
            f"{checkpoint_path} holds no tokenizer and {run_dir} has no tokenizer.json: it was "
            f"written before runs kept them; copy the tokenizer.json of its data cache into {run_dir}"
        )
    shape = {k: v for k, v in config["architecture"].items() if k in TransformerConfig.__dataclass_fields__}
    stack = "decoder" if shape.get("name") == DECODER else "encoder"  # the stack that holds the positions
    table = weights.get(f"{stack}.pos_emb.weight")  # none with relative positions: the record says
    max_len = int(table.shape[0]) if table is not None else int(record["max_len"])
    model = TransformerConfig(**shape).build(int(record.get("vocab_size", tokenizer.get_vocab_size())), max_len)
    model.load_state_dict(weights)
    model.to(device).eval()
    vocab = vocab_from_tokenizer(tokenizer, int(config.get("data", {}).get("n_sentinels", 100)))
    return Pretrained(model, tokenizer, vocab, config, checkpoint_path)
