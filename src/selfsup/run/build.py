"""From a composed config to the objects of a run, each group's `_target_` built with Hydra's `instantiate`:

    settings = settle(cfg, overrides)                 the door: the checks, then the typed settings (RunSettings)
    corpus, objective, evaluation = prepare(settings) data read, tokenized, cut into windows; every data check
    run = build(settings)                             + the model, the optimizer, the LightningModule

objective (conf/objective/)        an `Objective` subclass: instantiate(objective, vocab=, seq_len=, architecture=)
architecture (conf/architecture/)  a config with `build(vocab_size, max_len)`: the built-in TransformerConfig
optim (conf/optim/)                selfsup.optim.AdamWCosine or a class with its methods
eval (conf/eval/)                  selfsup.evaluation.Evaluation (its tasks: selfsup.evaluation.Task, its generation
                                   jobs: selfsup.evaluation.GenerationJob)
"""

from __future__ import annotations

import copy
import hashlib
import inspect
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from selfsup.common.names import LAST_CHECKPOINT, RunSummary
from selfsup.data import Corpus
from selfsup.data.builtin import stdlib_docstrings
from selfsup.data.pretrained_tokenizer import is_path, load_pretrained
from selfsup.data.sources import DataError
from selfsup.data.vocab import Vocab
from selfsup.errors import UserError
from selfsup.evaluation import EvalError, Evaluation, GenerationJob, PairSource, Task
from selfsup.objectives import Objective
from selfsup.run.checks import check_devices, check_overrides, check_values
from selfsup.run.settings import RunSettings


def make(node: Mapping, group: str, **runtime):
    """instantiate(node, **runtime) with one-line errors: a target that cannot be imported, a setting its
    class does not take, or the class's own refusal of a value."""
    target = node.get("_target_")
    if not target:
        raise UserError(
            f"{group} has no _target_: name the class that builds it (e.g. _target_: mypackage.MyObjective)"
        )
    cls = target_class(node, group)
    unknown = [k for k in node if not str(k).startswith("_") and not accepts(cls, str(k))]
    if unknown:
        taken = [p for p in inspect.signature(cls).parameters if p not in runtime and p not in ("self", "kwargs")]
        raise UserError(f"{group}.{unknown[0]} is not a setting of {target}: use {', '.join(taken) or 'none'}")
    try:  # the run's objects (a vocabulary, say) go to the class as they are, not through the config
        made = instantiate(node, _convert_="all", _partial_=bool(runtime))
        return made(**runtime) if runtime else made
    except (InstantiationException, ValueError, TypeError) as err:
        cause = err.__cause__ if isinstance(err, InstantiationException) else err
        if isinstance(cause, UserError):
            raise cause from None
        if isinstance(cause, (ValueError, TypeError)):
            raise UserError(str(cause) if str(cause).startswith(f"{group}.") else f"{group}: {cause}") from None
        raise


def target_class(node: Mapping, group: str) -> type:
    try:
        return get_class(node["_target_"])
    except Exception as err:  # noqa: BLE001 - ImportError, AttributeError, ValueError
        raise UserError(
            f"{group}._target_={node['_target_']} cannot be imported ({type(err).__name__}): check the "
            f"name, and that its package is installed or on PYTHONPATH"
        ) from None


def accepts(cls: type, key: str) -> bool:
    parameters = inspect.signature(cls).parameters
    return key in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def objective_class(objective: Mapping) -> type[Objective]:
    return target_class(objective, "objective")


def objective_name(objective: Mapping) -> str:
    """The objective's label: its config's name, else its class's."""
    return objective.get("name") or objective_class(objective).name


def check_settings(cfg: DictConfig) -> None:
    """The cheap checks of the settings, before any data is read."""
    cls = objective_class(cfg.objective)
    problem = cls.incompatibility(cfg.architecture.name) if hasattr(cls, "incompatibility") else None
    if problem:
        raise UserError(problem)
    check_devices(cfg)
    check_values(cfg)
    make(cfg.architecture, "architecture")  # its config checks its own values
    make(cfg.optim, "optim")
    metric = cfg.optimized_metric
    if metric not in ("val/loss", "val/perplexity", "val/accuracy") and not metric.startswith("eval/"):
        raise UserError(
            f"optimized_metric={metric} is not a metric a run reports: use val/loss, val/perplexity, "
            f"val/accuracy or an eval/<task>/<metric> such as eval/probe/accuracy"
        )
    if metric.startswith("eval/") and not evaluates(cfg.eval):
        raise UserError(
            f"optimized_metric={metric} needs the evaluation, but eval=none: drop eval=none or optimize val/loss"
        )
    evaluated = [
        *(["fixed"] if cfg.eval.fixed else []),
        *(["pairs"] if cfg.eval.get("pairs") else []),
        *(cfg.eval.tasks or {}),
        *(cfg.eval.get("generation") or {}),
    ]
    if metric.startswith("eval/") and metric.split("/")[1] not in evaluated:
        raise UserError(
            f"optimized_metric={metric}: this run evaluates no {metric.split('/')[1]!r}: use "
            + ", ".join(f"eval/{name}/..." for name in evaluated)
            + " (eval.tasks.NAME adds a task, eval.generation.NAME a generation job)"
        )
    if cfg.ckpt_path and not Path(cfg.ckpt_path).is_file():
        raise UserError(
            f"ckpt_path={cfg.ckpt_path} does not exist: pass a checkpoint file such as "
            f"outputs/<date>/<time>/checkpoints/last.ckpt, or resume=<run dir>"
        )


def settle(cfg: DictConfig, overrides: list[str] | None = None) -> RunSettings:
    """The door: the command's overrides (where given) checked against the composed config, then the settings and
    the objective (before any data is read); then the typed settings. `cfg` carries init.from's settings already
    (with_init)."""
    if overrides is not None:
        check_overrides(overrides, cfg)
    check_settings(cfg)
    check_objective(cfg)
    return RunSettings.of(cfg)


def make_objective(objective: Mapping, data_seq_len: int, family: str, vocab: Vocab) -> Objective:
    """The objective group's `Objective` over the run's vocabulary."""
    return make(objective, "objective", vocab=vocab, seq_len=data_seq_len, architecture=family)


def check_objective(cfg: DictConfig) -> None:
    """The objective's settings, before any data is read: built once over a stand-in vocabulary (and the
    positions of an init.from checkpoint against the length it asks for)."""
    size = max(cfg.data.vocab_size, 1_000_000)
    vocab = Vocab(size=size, n_sentinels=cfg.data.n_sentinels, word_start=torch.ones(size, dtype=torch.bool))
    objective = make_objective(cfg.objective, cfg.data.seq_len, cfg.architecture.name, vocab)
    from selfsup.run.continued import is_run_dir

    if init_source(cfg) and not is_run_dir(init_source(cfg)):  # (a run dir's positions: when its weights load)
        from selfsup.interop.hf_import import check_positions

        check_positions(init_source(cfg), model_length(cfg.data.seq_len, objective))


def model_length(data_seq_len: int, objective: Objective) -> int:
    """The model's positions: the objective's sequences and data.seq_len ones (the fixed exam's, the probe's)."""
    return max(objective.model_length, data_seq_len)


def init_source(cfg: DictConfig) -> str | None:
    """init.from: the transformers checkpoint (a folder or hub name) a run starts from, if any."""
    return (cfg.get("init") or {}).get("from")


def with_init(cfg: DictConfig, run_dir: Path | None = None) -> DictConfig:
    """A run from init.from=<checkpoint>: its architecture settings are the checkpoint's (selfsup.interop.hf_import.
    run_settings: its checkpoints, a resume and the export record them) and data.tokenizer its tokenizer. From a lab
    run dir (continued pretraining, selfsup.run.continued): its architecture settings, init.from its resolved dir
    (run_dir: the run whose recorded config this is, for a `sweep:` reference)."""
    source = init_source(cfg)
    if not source:
        return cfg
    from selfsup.run.continued import is_run_dir, resolve, with_own_record, with_parent

    continued = run_dir is not None and bool(RunSummary.read(run_dir).values.get("parent"))
    if continued and (run_dir / LAST_CHECKPOINT).is_file():  # a continued run's own record, read again
        return with_own_record(cfg, source, run_dir)
    if is_run_dir(source):
        return with_parent(cfg, resolve(source, run_dir))
    if cfg.data.tokenizer not in (None, source):
        raise UserError(
            f"init.from={source} brings its own tokenizer, data.tokenizer={cfg.data.tokenizer} another: drop "
            f"data.tokenizer (the checkpoint's rows belong to its tokens)"
        )
    folder = Path(source).expanduser()
    if not folder.exists() and is_path(source):
        raise UserError(
            f"init.from={source} does not exist: pass a lab run dir, a transformers folder (config.json, weights, "
            f"tokenizer.json) or a hub name such as gpt2"
        )
    try:  # (T5 v1.1's hub repositories hold spiece.model, no tokenizer.json)
        load_pretrained(source)
    except DataError:
        missing = folder.is_dir() and not (folder / "tokenizer.json").is_file()
        from huggingface_hub import constants

        if not folder.exists() and constants.HF_HUB_OFFLINE:
            raise UserError(
                f"init.from={source} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: download it "
                f"where the hub can be reached (save_pretrained to a folder F, then init.from=F), or unset HF_HUB_OFFLINE"
            ) from None
        raise UserError(
            f"init.from={source} {'has no tokenizer.json' if missing else 'brings no tokenizer.json the lab can read'}"
            f": save the model and its fast tokenizer in one folder F (model.save_pretrained(F); "
            f"transformers.AutoTokenizer.from_pretrained(...).save_pretrained(F)) and pass init.from=F"
        ) from None
    from selfsup.interop.hf_import import imported, run_settings

    settings = run_settings(source)
    rows, tokens = imported(source)[1].vocab_size, load_pretrained(source).get_vocab_size(with_added_tokens=True)
    if tokens > rows:
        raise UserError(
            f"init.from={source}: its tokenizer has {tokens} tokens, its embedding {rows} rows: the tokenizer is not "
            f"the model's; save both from the same checkpoint into one folder"
        )
    cls = objective_class(cfg.objective)
    problem = cls.incompatibility(settings["name"]) if hasattr(cls, "incompatibility") else None
    if problem:
        raise UserError(f"init.from={source} is architecture={settings['name']}: {problem}")
    return OmegaConf.merge(cfg, {"architecture": settings, "data": {"tokenizer": source}})


def evaluates(eval: Mapping) -> bool:
    """Whether the `eval` settings evaluate anything (eval=none: no exam, pairs, held-out text, infilling job, tasks
    or generation jobs)."""
    parts = ("fixed", "pairs", "heldout", "infilling", "tasks", "generation")
    return any(bool(eval.get(part)) for part in parts)


def make_evaluation(eval: Mapping) -> Evaluation | None:
    """The `eval` group's Evaluation, or None when it evaluates nothing (evaluates)."""
    if not evaluates(eval):
        return None
    conf = copy.deepcopy(OmegaConf.to_container(eval, resolve=True) if isinstance(eval, DictConfig) else dict(eval))
    with_targets(
        ((conf.get("pairs") or {}).get("sets") or {}),
        "eval.pairs.sets",
        PairSource,
        "pair-set setting",
        "{paths: [pairs.jsonl], group_field: UID}",
    )
    with_targets(
        conf.get("tasks") or {}, "eval.tasks", Task, "task setting", "{source: text_files, paths: [examples.jsonl]}"
    )
    with_targets(
        conf.get("generation") or {},
        "eval.generation",
        GenerationJob,
        "generation job setting",
        "{source: text_files, paths: [pairs.jsonl], source_field: document, target_field: summary}",
    )
    return make(conf, "eval")


def with_targets(nodes: dict, where: str, cls: type, what: str, example: str) -> None:
    """Each node of `nodes` (name -> settings) gets `_target_: selfsup.evaluation.<cls>` unless it names its own
    class; a node that is not a mapping, or a setting the class does not take, is refused in one line."""
    target = f"selfsup.evaluation.{cls.__name__}"
    for name, node in nodes.items():
        if not isinstance(node, dict):
            raise EvalError(f"{where}.{name} must be a mapping of {what}s, e.g. '+{where}.{name}={example}'")
        node.setdefault("_target_", target)
        if node["_target_"] == target:
            known = [p for p in inspect.signature(cls).parameters if p != "name"]
            unknown = [k for k in node if k != "_target_" and k not in known]
            if unknown:
                raise EvalError(f"{where}.{name}.{unknown[0]} is not a {what}: use {', '.join(known)}")


def make_corpus(settings: RunSettings, quiet: bool = False) -> Corpus:
    return Corpus(**asdict(settings.data), seed=settings.seed, quiet=quiet)


def tokenizer_hash(corpus: Corpus) -> str:
    return hashlib.sha256(corpus.tokenizer.to_str().encode()).hexdigest()


def prepare(settings: RunSettings, quiet: bool = False) -> tuple[Corpus, Objective, Evaluation | None]:
    """The data (token cache built or reused, cut into the objective's windows), the objective and the
    evaluation, whose tasks are read and checked against the pretraining documents. Without Lightning:
    bad data is refused before it is imported. A single run calls it twice: RunDirGuard, to refuse bad data
    before Hydra writes anything (it builds the cache), then the run, which reads the cache back (~0.2 s) quietly
    (the guard's notices are not repeated)."""
    corpus = make_corpus(settings, quiet)
    objective = make_objective(settings.objective, settings.data.seq_len, settings.family, corpus.prepare())
    corpus.set_window(objective.raw_length, settings.trainer.accumulate)
    evaluation = make_evaluation(settings.eval)
    if evaluation is not None:
        # the built-in tasks' and pairs' sentences come from the standard library's docstrings: read from the data
        # cache (a JSON file per interpreter) instead of gathered in a fresh interpreter (~0.4 s)
        stdlib_docstrings(settings.data.cache_dir)
        evaluation.check(corpus.training_keys, sharded=settings.trainer.strategy == "fsdp")
        if evaluation.pairs is not None:  # some pair fits the model's positions
            evaluation.pairs.fitting(corpus.tokenizer, model_length(settings.data.seq_len, objective))
    return corpus, objective, evaluation


@dataclass
class Run:
    """What `build` makes: the data module (its corpus: `.data.corpus`), the objective, the model and the
    LightningModule."""

    data: "SelfSupDataModule"  # noqa: F821 - Lightning's, imported by build
    objective: Objective
    model: torch.nn.Module
    module: "SelfSupModule"  # noqa: F821
    parent: object = None  # init.from's lab run (selfsup.run.continued.Parent), if it continues one


def build(settings: RunSettings, prepared: tuple | None = None) -> Run:
    """Everything a run trains; prepared: prepare(settings) if already done."""
    # Imported here, not at the top: they bring Lightning (~5 s), and `selfsup-train` checks settings before that
    from selfsup.data.datamodule import SelfSupDataModule
    from selfsup.training.module import SelfSupModule

    corpus, objective, evaluation = prepared or prepare(settings)
    vocab = corpus.vocab
    shape = make(settings.architecture, "architecture")
    max_len = model_length(settings.data.seq_len, objective)
    try:
        model = shape.build(vocab.size, max_len)
    except ValueError as err:
        raise UserError(f"architecture: {err}") from None
    parent = continued_from(settings, corpus)
    if settings.init_from and not settings.ckpt_path:  # (a checkpoint of the run holds its weights)
        if parent is not None:
            from selfsup.run.continued import load_weights

            load_weights(parent, model, settings.family)
        else:
            from selfsup.interop.hf_import import start_from

            start_from(settings.init_from, model, corpus.tokenizer, vocab.bos_id)
    if settings.trainer.compile:
        # Dynamo keeps compiled graphs per code object across models: the jobs of a multirun in one process
        # (e.g. a d_model sweep) would add theirs to one cache until its recompile limit, then run eagerly
        torch.compiler.reset()
        model.compile()  # in place: checkpoints keep plain parameter names
    if evaluation is not None:
        evaluation.setup(
            settings.family,
            vocab,
            corpus.tokenizer,
            settings.data.seq_len,
            corpus.val_tokens,
            max_len,
            make_model=lambda: shape.build(vocab.size, max_len),
            train_tokens=corpus.train_tokens,
            objective=objective.name,
            span=getattr(objective, "mean_span_length", None),
            cache_dir=corpus.cache_dir,
            infills=objective.infills,
        )
    t = settings.trainer
    module = SelfSupModule(
        model,
        objective,
        make(settings.optim, "optim"),
        max_steps=t.max_steps,
        accumulate=t.accumulate,
        seed=settings.seed,
        max_tokens=t.max_tokens,
        max_flops=t.max_flops,
        evaluation=evaluation,
        spent=(parent.flops, parent.tokens) if parent is not None else (0.0, 0.0),
    )
    return Run(SelfSupDataModule(corpus), objective, model, module, parent)


def continued_from(settings: RunSettings, corpus: Corpus):
    """The lab run that init.from continues (selfsup.run.continued.Parent), checked against this run's tokenizer
    and budget; None for a run from scratch or from a transformers checkpoint."""
    from selfsup.run.continued import check_tokenizer, is_run_dir, read_parent

    if not is_run_dir(settings.init_from):
        return None
    parent = read_parent(settings.init_from)
    check_tokenizer(parent, corpus.tokenizer.to_str(), settings.resolved.get("data") or {})
    t = settings.trainer
    for budget, spent, what in ((t.max_flops, parent.flops, "FLOPs"), (t.max_tokens, parent.tokens, "tokens")):
        if budget and spent >= budget:
            raise UserError(
                f"init.from={settings.init_from} spent {spent:.3g} training {what} already, trainer.max_"
                f"{what.lower()}={budget:.3g} leaves none: a budget counts the whole chain, raise it"
            )
    return parent
