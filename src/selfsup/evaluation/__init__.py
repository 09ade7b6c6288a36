"""Evaluation on one axis for every run: the fixed exam of its family, zero-shot minimal pairs and
downstream probes.

A run's own val/loss grades it on its own exam (its mask rate, its span length). `Evaluation`
scores every run on exams that do not depend on its settings, after training (and, with
`every_n_validations`, at every k-th validation), logged as `eval/<task>/<metric>` beside
`train/tokens_seen`:

    eval/fixed/loss, eval/fixed/perplexity      the family's fixed exam (selfsup.evaluation.fixed): the mean
                                                 over a panel of settings of each one's loss (encoder: MLM at
                                                 mask rates 0.10-0.40; encoder-decoder: span corruption at
                                                 noise densities 0.10-0.50 and mean spans 2-10; decoder: CLM)
    eval/fixed/loss_low, _high, _se              its stratified bootstrap 95% interval over the exam's windows
                                                 and standard error (selfsup.evaluation.stats.exam_loss)
    eval/fixed/unigram_gap, _low, _high          the loss minus the training split's unigram on the same
                                                 targets, with its paired interval (below 0: beyond word
                                                 frequencies)
    eval/fixed/<member>/loss                     each member's loss (rate_15: MLM at 15%; rate_15_span_3: span
                                                 corruption at 0.15, mean span 3); none for the decoder's one
    eval/fixed/<kind>/loss, .../fraction, .../unigram_loss
                                                 the exam's loss split by kind of target (MLM: masked, random,
                                                 unchanged; span corruption: first, later, and sentinel, the
                                                 sentinels and eos, out of the loss and without a fraction),
                                                 pooled over the members weighted as the loss, beside the
                                                 training split's unigram on the same targets
    eval/heldout/bits_per_byte, _low, _high      a held-out text scored by the family's scorer in bits per UTF-8
                                                 byte, with its interval over the text's documents
                                                 (selfsup.evaluation.heldout)
    eval/pairs/accuracy, eval/pairs/<type>/...   zero-shot minimal pairs, beside their random-init and n-gram
                                                 references (selfsup.evaluation.pairs)
    eval/predictions                             a table of the exam's first examples with the model's
                                                 predictions (FixedExam.examples; a W&B Table)
    eval/<task>/accuracy, eval/<task>/macro_f1   the probe of each task in eval.tasks (the built-in: probe)
    eval/<task>/accuracy_se, eval/pairs/.../accuracy_se   the accuracy's standard error over the test examples
    eval/<task>/random_init_accuracy, ..._macro_f1, eval/<task>/majority_accuracy   its baselines: the same
                                                 probe on a randomly initialised model of the same shape, and
                                                 always answering the most frequent class
    eval/<job>/loss, exact_match, token_f1       each generation job of eval.generation (selfsup.evaluation.
                                                 generation), a copy fine-tuned per fine-tuning seed: the mean over
                                                 test examples of each target's per-token loss under teacher
                                                 forcing, and of its greedy prediction's exact match and token F1;
                                                 each with _se, random_init_<score> (_sd) and <score>/margin, _low,
                                                 _high (for the loss: random-init's minus the run's, so a positive
                                                 margin is better, as for every score); an encoder writes no text
                                                 and is not scored (not_written)
    eval/<job>/predictions                       a W&B Table of its first test examples' predictions
    eval/infilling/loss, exact_match, token_f1   the infilling job (decoders, zero-shot): a held-out text's
                                                 middle written between its prefix and suffix in the layout the
                                                 run trained with (FIM's, else the prefix alone), scored as a
                                                 generation job is (selfsup.evaluation.infilling)

Built from the `eval` config group with Hydra's `instantiate` (conf/eval/default.yaml). Plain torch:
the LightningModule calls it at the end of a validation.
"""

from selfsup.evaluation.fixed import EXAMS, FixedExam
from selfsup.evaluation.heldout import HeldoutText
from selfsup.evaluation.infilling import Infilling
from selfsup.evaluation.jobs import GenerationJob
from selfsup.evaluation.pair_sets import PAIR_TYPES, PairSource
from selfsup.evaluation.pairs import MinimalPairs
from selfsup.evaluation.probe import PROTOCOLS, Finetune
from selfsup.evaluation.suite import EXAMPLE_COLUMNS, Evaluation
from selfsup.evaluation.tasks import BUILTIN_TASKS, EvalError, Examples, Task

__all__ = [
    "EXAMPLE_COLUMNS",
    "BUILTIN_TASKS",
    "EXAMS",
    "PAIR_TYPES",
    "PROTOCOLS",
    "EvalError",
    "Evaluation",
    "Examples",
    "Finetune",
    "FixedExam",
    "GenerationJob",
    "HeldoutText",
    "Infilling",
    "MinimalPairs",
    "PairSource",
    "Task",
]
