"""Bad input: one clear line, a non-zero exit, no traceback, nothing overwritten."""

import json

import pytest

from selfsup.errors import UserError
from selfsup.run.settings import RunSettings


def assert_refused(out, *words):
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-2000:]
    assert "Traceback" not in text, text[-3000:]
    for w in words:
        assert w in text, (w, text[-2000:])


@pytest.fixture
def files(tmp_path):
    d = tmp_path / "files"
    d.mkdir()
    (d / "empty.txt").write_text("")
    (d / "binary.txt").write_bytes(bytes(range(256)) * 40)
    (d / "latin1.txt").write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e ".encode("latin-1") * 200)
    (d / "small").mkdir()
    (d / "small" / "a.txt").write_text("A few words of text. " * 5)
    (d / "small" / "b.txt").write_text("Some other words here. " * 5)
    (d / "nofield.jsonl").write_text(json.dumps({"body": "text under another key"}) + "\n")
    (d / "words.jsonl").write_text("".join(json.dumps({"text": w}) + "\n" for w in ["cat", "dog", "sun"] * 300))
    return d


def refusal(cache_dir, *overrides) -> str | None:
    """What `selfsup-train` says about these overrides before it reads any data, in-process: Hydra's
    composition, the settings, the objective, the data settings (the CLI prints it as one line, exit 2)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from selfsup.run.build import check_objective, check_settings, make_corpus
    from selfsup.run.checks import config_error_line
    from selfsup.run.cli import CONF_DIR
    from selfsup.run.schema import register

    register()
    try:
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            cfg = compose("train", overrides=[f"data.cache_dir={cache_dir}", *overrides])
        check_settings(cfg)
        check_objective(cfg)
        make_corpus(RunSettings.of(cfg))._check_settings()
    except (HydraException, OmegaConfBaseException) as err:
        return config_error_line(err)
    except UserError as err:
        return str(err)
    return None


@pytest.mark.parametrize(
    "overrides,words",
    [
        (["objective=clm", "architecture=encoder"], ["see its own answer"]),
        (["objective=mlm", "architecture=decoder"], ["right context"]),
        (["objective=nope"], ["objective/nope", "mlm"]),
        (["architecture=nope"], ["architecture/nope"]),
        (["architecture.activation=swish"], ["architecture.activation=swish", "gelu, relu"]),
        (["objective.mask_rte=0.2"], ["mask_rte"]),
        (["data.seq_len=abc"], ["data.seq_len"]),
        (["objective.mask_rate=0"], ["objective.mask_rate", "hides nothing"]),
        (["objective.mask_rate=1.0"], ["objective.mask_rate", "no context"]),
        (["objective=span_corruption", "data.seq_len=2"], ["data.seq_len=2", "data.seq_len >= 3"]),
        (["trainer.precision=bogus"], ["trainer.precision=bogus", "bf16-mixed"]),
        (["objective=span_corruption", "data.seq_len=512", "data.n_sentinels=10"], ["sentinels", "data.n_sentinels"]),
        (["data.vocab_size=100"], ["data.vocab_size"]),
        (["ckpt_path=/nonexistent/last.ckpt"], ["ckpt_path", "does not exist"]),
        (["objective._target_=nowhere.Objective"], ["objective._target_=nowhere.Objective cannot be imported"]),
        (["optim.lr=-1"], ["optim.lr=-1.0 must be positive"]),
        (["objective.schedule.shape=step"], ["objective.schedule.shape=step is unknown", "linear, cosine"]),
        (
            ["objective=clm", "objective.schedule.end=0.1"],
            ["objective.schedule.end: this objective (CausalLM) has no rate"],
        ),
        (
            ["optimized_metric=eval/ordr/accuracy"],
            ["optimized_metric=eval/ordr/accuracy: this run evaluates no 'ordr'", "eval/probe/..."],
        ),
    ],
)
def test_config_mistakes_in_one_line(cache_dir, overrides, words):
    message = refusal(cache_dir, *overrides)
    assert message is not None and "\n" not in message, message
    for w in words:
        assert w in message, (w, message)


def test_a_setting_inside_a_part_that_is_off_is_one_line(train, tmp_path):
    """eval=none turns the held-out text off (null); OmegaConf cannot merge a setting into null, and said so in a
    traceback. The setting named is the one inside the null part, whatever comes after it."""
    out = train("eval=none", "eval.heldout.max_bytes=100", "trainer.max_steps=3", tiny=False)
    assert_refused(out, "eval.heldout.max_bytes=100: eval.heldout is null (off) in this config", "eval=default")
    assert len(out.stderr.strip().splitlines()) == 1 and out.returncode == 2 and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "overrides,words",
    [
        (["objective=clm", "architecture=encoder"], ["see its own answer"]),  # the lab's own refusal
        (["objective=nope"], ["objective/nope", "mlm"]),  # Hydra's, folded into one line
        # Hydra merges {} into the probe's mapping, which would keep it: the command says what removes it
        (["eval.tasks={}"], ["eval.tasks={} keeps eval.tasks's entries (probe)", "eval.tasks=null for none"]),
    ],
)
def test_config_mistakes_on_the_command_line(train, tmp_path, overrides, words):
    out = train(*overrides)
    assert_refused(out, *words)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert out.returncode == 2 and not (tmp_path / "run").exists()


@pytest.mark.slow  # a sweep refused; the default suite refuses the same setting in a single run (above)
def test_a_sweep_that_would_keep_what_it_empties_is_refused_before_writing(train, tmp_path):
    out = train("eval.tasks={}", "seed=0,1", multirun=True)
    assert_refused(out, "eval.tasks={} keeps eval.tasks's entries (probe)")
    assert out.returncode == 2 and not (tmp_path / "multirun").exists()


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("architecture.n_layers", 0, "architecture.n_layers=0 must be at least 1"),
        ("architecture.d_model", -4, "architecture.d_model=-4 must be at least 1"),
        ("trainer.val_check_interval", 0, "trainer.val_check_interval=0 must be at least 1"),
        ("optim.lr", -1.0, "optim.lr=-1.0 must be positive"),
        ("optim.grad_clip", -0.5, "optim.grad_clip=-0.5 is negative"),
        ("trainer.accelerator", "tpu", "trainer.accelerator=tpu is not supported"),
    ],
)
def test_out_of_range_settings(cache_dir, key, value, words):
    """The checks `selfsup-train` runs before building."""
    assert refusal(cache_dir) is None  # the defaults pass
    message = refusal(cache_dir, f"{key}={value}")
    assert message is not None and words in message, message


@pytest.mark.parametrize(
    "path,words",
    [
        ("missing.txt", ["does not exist"]),
        ("empty.txt", ["empty.txt"]),
        ("binary.txt", ["binary.txt"]),
        ("latin1.txt", ["latin1.txt", "UTF-8"]),
        ("nofield.jsonl", ["nofield.jsonl", "text"]),
        ("small", ["too small"]),
    ],
)
def test_data_mistakes(cache_dir, files, path, words):
    """Refused in one line before anything is cached (in-process; the command line: the next test)."""
    from hydra import compose, initialize_config_dir

    from selfsup.data import DataError
    from selfsup.run.build import prepare
    from selfsup.run.cli import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose(
            "train",
            overrides=[
                "data=text_files",
                f"data.paths=[{files / path}]",
                "data.vocab_size=300",
                "data.n_sentinels=4",
                f"data.cache_dir={cache_dir}",
            ],
        )
    with pytest.raises(DataError) as err:
        prepare(RunSettings.of(cfg))
    assert "\n" not in str(err.value)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


# a run refused on its data (~6 s); the default suite: tests/data/test_data_datamodule.py refuses one-token documents
@pytest.mark.slow
def test_one_token_documents_are_refused_in_one_line(train, files, cache_dir):
    cached = sorted(cache_dir.iterdir())
    out = train("data=text_files", f"data.paths=[{files / 'words.jsonl'}]", "data.vocab_size=300", "data.n_sentinels=4")
    assert_refused(out, "words.jsonl", "is a single token", "no objective has context", "several words")
    assert [line for line in out.stderr.splitlines() if line.strip()] == [out.stderr.strip()]  # one line
    assert out.stderr.startswith("error: text_files: ")
    assert sorted(cache_dir.iterdir()) == cached  # the token cache: nothing added, nothing lost


@pytest.mark.slow  # the same guard as tests/e2e/test_faults.py::test_two_runs_into_one_dir_one_is_refused
def test_a_finished_run_is_never_overwritten(train, tmp_path):
    run = tmp_path / "keep"
    assert train("objective=clm", run_dir=run).returncode == 0
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and ".hydra" not in p.parts}
    again = train("objective=clm", run_dir=run)
    assert_refused(again, "already holds a run")
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and ".hydra" not in p.parts}
    assert before == after
