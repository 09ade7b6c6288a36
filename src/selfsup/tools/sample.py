"""`selfsup-sample RUN_DIR|CHECKPOINT`: what a trained model predicts, by its architecture.

    selfsup-sample outputs/<date>/<time> --prompt "The module"                  decoder: a continuation
    selfsup-sample outputs/<date>/<time> --prompt "The <mask> of a <mask>"      encoder: top-k per <mask>
    selfsup-sample outputs/<date>/<time> --prompt "The <extra_id_0> of a file"  encoder-decoder: each span
    selfsup-sample outputs/<date>/<time> --prompt "<fim_prefix>The<fim_suffix> of a file<fim_middle>"  FIM: the middle

A decoder samples at temperature 0.8 from the 200 likeliest tokens (nanoGPT's sample.py); --greedy takes the
argmax. A prefix-LM decoder reads the prompt as its bidirectional prefix, as it was trained; a decoder trained with
objective=fim continues its default prompt `<fim_prefix>prefix<fim_suffix>suffix<fim_middle>` with the middle. An encoder-decoder
writes each span greedily. --max-new-tokens beyond the model's positions is capped there, with one note on stderr.
"""

from __future__ import annotations

import argparse
import sys

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.errors import UserError
from selfsup.interop.pretrained import check_generation_settings, load

TEMPERATURE, TOP_K = 0.8, 200  # a decoder's sampling by default: nanoGPT's sample.py
PROMPTS = {
    DECODER: "The module",
    ENCODER: "The <mask> of the <mask> is returned.",
    ENCODER_DECODER: "The <extra_id_0> of the <extra_id_1> is returned.",
    "rewrite": "The <mask> of the <mask> is returned.",  # an encoder-decoder trained as BART writes it back whole
    "fim": "<fim_prefix>Return the<fim_suffix> of the list.<fim_middle>",  # a decoder trained with FIM: the middle
}


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(
        prog="selfsup-sample",
        description=(
            "Show what a trained model predicts: decoders continue a prompt, encoders fill each <mask> (top-k "
            "tokens with probabilities), encoder-decoders write the span of each sentinel <extra_id_N> (trained as BART: "
            "the whole text back, each <mask> filled)."
        ),
    )
    parser.add_argument("path", metavar="RUN_DIR|CHECKPOINT", help="a run dir (its best checkpoint) or a .ckpt file")
    parser.add_argument("--prompt", help="the text (default: one for the model's architecture)")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=32,
        help="decoder and encoder-decoder: tokens to write "
        "(at most what the model's positions hold: capped there, with a note)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help=f"decoder: the sampling temperature (default {TEMPERATURE}, as nanoGPT's sample.py; 0: argmax)",
    )
    parser.add_argument(
        "--top-k",
        type=int,
        default=None,
        help=f"decoder: sample from the k likeliest tokens "
        f"(default {TOP_K}; 0: every token); encoder: how many tokens to show per <mask> (default 5)",
    )
    parser.add_argument(
        "--greedy",
        action="store_true",
        help="decoder: the likeliest token at each step (argmax: the same text every time, often a repeating one)",
    )
    parser.add_argument("--seed", type=int, default=0, help="decoder sampling seed")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        if args.greedy and args.temperature is not None:
            raise UserError(f"--greedy and --temperature {args.temperature} ask for two things: pass one of them")
        temperature = 0.0 if args.greedy else TEMPERATURE if args.temperature is None else args.temperature
        check_generation_settings(args.max_new_tokens, temperature, args.top_k, flags=True)  # before loading
        p = load(args.path, args.device)
        kind = "rewrite" if p.rewrites else "fim" if p.fills_middle else p.architecture
        prompt = args.prompt if args.prompt is not None else PROMPTS[kind]
        print(f"{p.architecture} from {p.checkpoint}")
        max_new_tokens = args.max_new_tokens
        if p.architecture != ENCODER:
            note = p.limit_note(prompt, max_new_tokens, flags=True)  # refuses a prompt the model cannot read
            if note:
                print(f"note: {note}", file=sys.stderr)
                max_new_tokens = p.generation_limit(prompt)
        if p.architecture == DECODER:
            top_k = TOP_K if args.top_k is None else args.top_k
            print(prompt + p.generate(prompt, max_new_tokens, temperature, top_k, args.seed))
        elif p.architecture == ENCODER:
            print(prompt)
            for n, choices in enumerate(p.fill_masks(prompt, args.top_k or 5)):
                print(f"<mask> {n}: " + "  ".join(f"{token!r} {prob:.3f}" for token, prob in choices))
        elif p.rewrites:
            print(prompt)
            print(p.reconstruct(prompt, max_new_tokens))
        else:
            print(prompt)
            for sentinel, span in p.fill_spans(prompt, max_new_tokens).items():
                print(f"{sentinel}: {span!r}")
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
