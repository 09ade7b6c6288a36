"""selfsup-report end to end: a real tiny sweep (mask rate x seed, W&B offline), reported as HTML and Markdown."""

import base64
import csv
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import forked
import pytest
from conftest import TINY, wandb_history, wandb_run_record
from test_report_browser import assert_fits, browser_fixture, page_facts  # noqa: F401 - the `browser` fixture

ENV = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}  # no key: runs are offline
REPORT = ["selfsup-report"] if shutil.which("selfsup-report") else [sys.executable, "-m", "selfsup.report"]


def sweep(root: Path, cache_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return forked.run(
        ["selfsup-train", "-m", *TINY, f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={root}", *overrides],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )


def report(*args) -> subprocess.CompletedProcess:
    return forked.run([*REPORT, *map(str, args)], capture_output=True, text=True, env=ENV, timeout=300)


# The tests of this 4-run sweep are slow (~30 s for the sweep): the default suite reads the report of a user's task
# through a sweep's console, table, report and verdict (test_a_users_task_is_in_the_closing_lines...)
@pytest.fixture(scope="module")
def mask_sweep(cache_dir, tmp_path_factory) -> Path:
    """4 jobs: objective.mask_rate=0.1,0.4 x seed=0,1 (MLM), W&B offline."""
    root = tmp_path_factory.mktemp("report") / "sweep"
    out = sweep(root, cache_dir, "objective.mask_rate=0.1,0.4", "seed=0,1")
    assert out.returncode == 0, out.stderr[-3000:]
    (root.parent / "console.txt").write_text(out.stdout)
    return root


@pytest.fixture(scope="module")
def html_report(mask_sweep) -> tuple[str, subprocess.CompletedProcess]:
    out = report(mask_sweep)
    assert out.returncode == 0, out.stderr[-3000:]
    path = mask_sweep / "report.html"
    assert out.stdout.strip().splitlines()[-1].endswith(str(path))  # says where it was written, last
    return path.read_text(), out


class Tables(HTMLParser):
    """The rows of every <table>, as lists of cell texts."""

    def __init__(self):
        super().__init__()
        self.rows, self._row, self._cell = [], None, None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def html_table(text: str, table: str = "runs") -> list[dict]:
    """The rows of <table id=table> as dicts by column."""
    start = text.index(f'<table id="{table}"')
    parser = Tables()
    parser.feed(text[start : text.index("</table>", start)])
    header, *rows = parser.rows
    return [dict(zip(header, row)) for row in rows]


def md_table(text: str, after: str = "## Runs") -> list[dict]:
    """The rows of the first table after the line `after`, with the columns of the tables it was split into to
    fit 200 columns (those that follow it, separated by an empty line, with the same first column)."""

    def split(line):
        return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]

    tables, lines = [], []
    for line in text.split(after + "\n", 1)[1].splitlines() + [""]:
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            tables.append(lines)
            lines = []
            if tables and split(tables[0][0])[0] != split(tables[-1][0])[0]:
                tables.pop()
                break
        elif line and tables:
            break
    rows = [{} for _ in tables[0][2:]]
    for table in tables:
        header = split(table[0])
        for row, line in zip(rows, table[2:]):
            row.update(zip(header, split(line)))
    return rows


@pytest.mark.slow
def test_one_row_per_run_with_the_swept_values(html_report, mask_sweep):
    rows = html_table(html_report[0])
    assert [r["run"] for r in rows] == ["0", "1", "2", "3"]
    assert [(r["objective.mask_rate"], r["seed"]) for r in rows] == [
        ("0.1", "0"),
        ("0.1", "1"),
        ("0.4", "0"),
        ("0.4", "1"),
    ]
    assert "data.seq_len" not in rows[0]  # the same in every run: not a swept value
    for row in rows:
        assert (row["objective"], row["architecture"], row["status"], row["data"]) == (
            "mlm",
            "encoder",
            "finished",
            "wandb-file",
        )


@pytest.mark.slow
def test_values_are_the_last_ones_logged_to_wandb(html_report, mask_sweep):
    rows = html_table(html_report[0])
    with ThreadPoolExecutor(4) as pool:  # read back independently with wandb's inspector
        histories = list(pool.map(wandb_history, [mask_sweep / str(job) for job in range(4)]))
    for row, history in zip(rows, histories):

        def last(key, history=history):
            return [item[key] for item in history if key in item][-1]

        assert row["val loss*"] == f"{last('val/loss'):.4f}"
        assert row["val ppl"] == f"{last('val/perplexity'):.2f}"
        assert row["val signal/token"] == f"{last('val/signal_per_token'):.3f}"
        assert row["tokens seen"] == f"{last('train/tokens_seen'):,.0f}"
        summary = json.loads((mask_sweep / row["run"] / "summary.json").read_text())
        short = summary["wall_seconds"] < 60  # under a minute: its tokens/s is no throughput figure
        assert row["tokens/s"] == f"{summary['tokens_per_sec']:,.0f}" + (
            f" (not a benchmark: {summary['wall_seconds']:.0f} s run)" if short else ""
        )
        assert row["fixed loss*"] == (  # with its 95% interval over the exam's windows
            f"{last('eval/fixed/loss'):.3f} [{last('eval/fixed/loss_low'):.3f}, {last('eval/fixed/loss_high'):.3f}]"
        )
        assert row["probe acc"] == f"{last('eval/probe/accuracy'):.4f}"
        assert row["probe margin"] == (
            f"{last('eval/probe/margin'):+.3f} [{last('eval/probe/margin_low'):+.3f}, "
            f"{last('eval/probe/margin_high'):+.3f}]"
        )
        assert row["FLOPs"] == f"{last('train/flops_seen'):.2g}"
        assert row["targets"] == f"{last('train/targets_seen'):,.0f}"
    assert len({r["val loss*"] for r in rows}) > 1


@pytest.mark.slow
def test_html_is_self_contained_with_real_png_plots(html_report):
    import matplotlib.image as mpimg

    text = html_report[0]
    images = re.findall(r'<figure id="([^"]+)"><img alt="[^"]*" src="data:image/png;base64,([^"]+)"', text)
    assert [name for name, _ in images] == [
        "val_loss_vs_tokens",
        "train_loss_vs_tokens",
        "fixed_loss_vs_mask_rate",
        "heldout_vs_mask_rate",
        "pairs_vs_mask_rate",
        "probe_vs_mask_rate",
    ]  # 1 span length: no span plot
    # evaluated once per run: one point per setting, no curve against tokens or FLOPs, and a line says so
    for name in ("probe_vs_tokens", "pairs_vs_tokens"):
        [line] = re.findall(rf'<p class="not-drawn" id="{name}">(.*?)</p>', text)
        assert "not drawn, the evaluation ran once per run" in line and "eval.every_n_validations=1" in line
    assert 'id="probe_vs_flops"' not in text
    for name, data in images:
        png = base64.b64decode(data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, name
        pixels = mpimg.imread(io.BytesIO(png), format="png")
        assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300, name
        assert pixels[..., :3].std() > 0.05, f"{name} is (nearly) one color"
    assert not re.search(r'(src|href)="(?!data:)', text)  # nothing outside the file
    assert "never rank mask rates, span lengths or objectives by it" in text  # a run's own val loss
    assert "fixed-exam loss (eval/fixed/loss)" in text and "margins over random-init" in text
    assert "never by raw accuracies" in text


@pytest.mark.slow
def test_the_verdict_is_the_same_in_the_console_the_report_and_verdict_json(html_report, mask_sweep):
    """One function computes the verdict; the end of the sweep, verdict.json and both report formats print it."""
    kept = json.loads((mask_sweep / "verdict.json").read_text())
    verdict = " ".join(kept["verdict"].split())
    assert kept["runs"] == [str(mask_sweep / str(job)) for job in range(4)]
    # 2 seeds per mask rate: each setting's margins over its seeds, and the difference with its interval
    assert verdict.startswith("Verdict (margin over random-init, 95% paired-bootstrap interval; held equal: 6 steps")
    assert re.search(
        r"mlm mask_rate=0\.[14] mean [+-]0\.\d{3} \([+-]0\.\d{3} to [+-]0\.\d{3} over 2 seeds, "
        r"interval above 0 at \d of 2 seeds\)",
        verdict,
    )
    assert re.search(
        r"mlm mask_rate=0\.[14] - mlm mask_rate=0\.[14] [+-]0\.\d{3} \[[+-]0\.\d{3}, [+-]0\.\d{3}\]", verdict
    )
    console = (mask_sweep.parent / "console.txt").read_text()
    printed = console[console.index("Verdict (margin") : console.index("Sweep outputs:")]
    assert " ".join(printed.split()) == verdict
    block = re.search(r'<div id="verdict"><p><b>(.*?)</b></p><ul>(.*?)</ul></div>', html_report[0], re.S)
    shown = [block.group(1)] + re.findall(r"<li>(.*?)</li>", block.group(2))
    assert " ".join(html.unescape(" ".join(shown)).split()) == verdict
    out = report(mask_sweep, "--out", mask_sweep.parent / "r.md")
    assert out.returncode == 0, out.stderr[-2000:]
    md = (mask_sweep.parent / "r.md").read_text()
    part = md[md.index("**Verdict") : md.index("\n## ", md.index("**Verdict"))]  # to the next section
    assert " ".join(part.replace("**", "").replace("\n- ", "\n").split()) == verdict
    # the fixed exam and the held-out text: a section each, the settings paired over the same windows (documents)
    for sitting in ("fixed exam (loss in nats, lower is better): ", "held-out text (bits per byte, lower is better): "):
        assert sitting in verdict
    assert re.search(
        r"mlm mask_rate=0\.[14] (is lower than mlm mask_rate=0\.[14] by|- mlm mask_rate=0\.[14] )", verdict
    )
    # the W&B summary of the sweep's last job holds the sweep's verdict (its jobs so far: all of them)
    from conftest import wandb_summary

    assert " ".join(wandb_summary(mask_sweep / "3")["summary"]["sweep_verdict"].split()) == verdict


@pytest.mark.slow
def test_predictions_show_the_same_exam_examples_for_every_run_with_each_models_guesses(html_report, mask_sweep):
    rows = html_table(html_report[0], "predictions")
    assert [(r["run"], r["example"]) for r in rows] == [(str(job), str(i)) for job in range(4) for i in (0, 1)]
    for i in (0, 1):  # the same window and masks for every run of the family: comparable by eye
        inputs = {r["input"] for r in rows if r["example"] == str(i)}
        targets = {r["target"] for r in rows if r["example"] == str(i)}
        assert len(inputs) == 1 and len(targets) == 1 and "<mask>" in inputs.pop()
    [offline] = (mask_sweep / "0" / "wandb").glob("offline-run-*")
    tables = sorted((offline / "files" / "media" / "table" / "eval").glob("predictions_*.table.json"))
    last = json.loads(tables[-1].read_text())  # the W&B Table of the last evaluation, in the run files
    assert last["columns"] == ["step", "example", "input", "target", "prediction", "accuracy"]
    first = dict(zip(last["columns"], last["data"][0]))
    row = rows[0]
    assert (row["target"], row["prediction"]) == (first["target"], first["prediction"]) and first["step"] == 6
    guesses, targets = first["prediction"].split("|"), first["target"].split("|")
    assert len(guesses) == len(targets) and first["accuracy"] == pytest.approx(
        sum(g == t for g, t in zip(guesses, targets)) / len(targets), abs=1e-4
    )


@pytest.mark.slow
def test_markdown_writes_png_files_and_wandb_says_how_to_upload_offline_runs(mask_sweep, tmp_path):
    out = report(mask_sweep, "--format", "md", "--out", tmp_path / "out" / "summary.md", "--wandb")
    assert out.returncode == 0, out.stderr[-3000:]
    md = tmp_path / "out" / "summary.md"
    text = md.read_text()
    rows = md_table(text)
    assert len(rows) == 4 and {r["status"] for r in rows} == {"finished"}
    cost = md_table(text, "Their cost:")  # the runs table's second part
    assert [r["run"] for r in cost] == [r["run"] for r in rows] and all(r["tokens seen"] for r in cost)
    assert len(md_table(text, "## Predictions")) == 8
    too_wide = [line for line in text.splitlines() if line.startswith("|") and len(line) > 200]
    assert not too_wide, too_wide[0]  # the Markdown's tables fit 200 columns
    pngs = sorted((tmp_path / "out").glob("*.png"))
    assert [p.name for p in pngs] == [
        "summary-fixed_loss_vs_mask_rate.png",
        "summary-heldout_vs_mask_rate.png",
        "summary-pairs_vs_mask_rate.png",
        "summary-probe_vs_mask_rate.png",
        "summary-train_loss_vs_tokens.png",
        "summary-val_loss_vs_tokens.png",
    ]
    assert "*Probe accuracy against tokens seen and training FLOPs: not drawn" in text
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert f"]({png.name})" in text
    # offline runs: the command that uploads them, then rerun; nothing published
    [sync] = [line for line in out.stdout.splitlines() if "wandb sync" in line]
    offline = sorted(str(p) for p in mask_sweep.glob("*/wandb/offline-run-*"))
    assert len(offline) == 4 and sorted(sync.split()[2:]) == offline
    assert "rerun with --wandb" in out.stdout
    assert str(md) in out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def failed_sweep(cache_dir, tmp_path_factory) -> Path:
    """2 jobs, CSV logger only: lr 1e-3 trains, 1e9 fails at its first step (the loss becomes NaN)."""
    root = tmp_path_factory.mktemp("report_failed") / "sweep"
    out = sweep(root, cache_dir, "optim.lr=1e-3,1e9", "logger=csv")
    assert out.returncode == 1 and (root / "1" / "error.txt").is_file(), out.stderr[-3000:]
    return root


# a sweep with a failed job (~10 s); the default suite: tests/test_tune_faults.py reports damaged sweeps in-process
@pytest.mark.slow
def test_a_failed_job_is_listed_with_its_error_and_csv_logs_are_read(failed_sweep):
    out = report(failed_sweep, "--format", "md")
    assert out.returncode == 0, out.stderr[-3000:]
    ok, failed = md_table((failed_sweep / "report.md").read_text())
    with open(failed_sweep / "0" / "csv" / "metrics.csv") as f:
        last_val_loss = [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")][-1]
    assert (ok["status"], ok["optim.lr"], ok["data"]) == ("finished", "0.001", "csv")
    assert ok["val loss*"] == f"{last_val_loss:.4f}"
    error = (failed_sweep / "1" / "error.txt").read_text().strip().removeprefix("error: ")
    assert failed["optim.lr"] == "1e+09" and failed["val loss*"] == "-" and "loss became nan" in error
    assert failed["status"].startswith("failed: ")  # (cut to fit the table's 200 columns; below it, whole)
    assert f"- **{failed['run']}** failed: {error}" in (failed_sweep / "report.md").read_text().splitlines()
    assert f"failed: 1 ({failed_sweep / '1'}): {error}" in out.stdout


# a sweep with a failed job (~10 s); the default suite: tests/test_tune_faults.py reports damaged sweeps in-process
@pytest.mark.slow
def test_wandb_without_wandb_runs_exits_2_after_writing_the_report(failed_sweep):
    out = report(failed_sweep, "--format", "md", "--out", failed_sweep / "again.md", "--wandb")
    assert out.returncode == 2 and out.stderr.startswith("error: --wandb") and len(out.stderr.splitlines()) == 1
    assert (failed_sweep / "again.md").is_file() and str(failed_sweep / "again.md") in out.stdout


@pytest.mark.parametrize("what", ["missing", "empty", "file"])
def test_a_path_that_is_not_a_sweep_exits_2_with_one_line(tmp_path, what):
    path = tmp_path / "nothing-here"
    if what == "empty":
        path.mkdir()
    elif what == "file":
        path.write_text("{}")
    out = report(path)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("error: ")
    assert str(path) in out.stderr and "Traceback" not in out.stderr
    assert not list(tmp_path.glob("**/report.*"))


@pytest.mark.slow
def test_the_sweep_is_four_wandb_runs_in_one_group(mask_sweep):
    records = [wandb_run_record(mask_sweep / str(job)) for job in range(4)]
    assert len({r["run_id"] for r in records}) == 4
    assert len({r["run_group"] for r in records}) == 1
    assert all(any(t.startswith("objective.mask_rate=") for t in r["tags"]) for r in records)


def test_val_rows_get_the_tokens_seen_of_their_training_step():
    """W&B's step_sync does not always copy train/tokens_seen into the val rows, and sometimes copies the
    previous step's value into the perf rows (both seen in real runs): a val row takes the value of the
    training row of its own global step."""
    from selfsup.report import fill_tokens_seen

    history = [
        {"train/loss": 6.2, "train/tokens_seen": 256, "trainer/global_step": 0},
        {"perf/tokens_per_sec": 400.0, "train/tokens_seen": 256, "trainer/global_step": 1},
        {"train/loss": 6.1, "train/tokens_seen": 512, "trainer/global_step": 1},
        {"val/loss": 6.0, "trainer/global_step": 1},
        {"perf/tokens_per_sec": 400.0, "train/tokens_seen": 512, "trainer/global_step": 2},
        {"val/loss": 5.9, "trainer/global_step": 2},
    ]  # no train row of step 2 logged: the last value
    assert [
        row.get("train/tokens_seen") for row in fill_tokens_seen(history, "trainer/global_step") if "val/loss" in row
    ] == [512, 512]


@pytest.mark.slow
def test_the_header_says_which_code_ran_and_what_every_run_shares(html_report, mask_sweep):
    from selfsup.common.version import describe

    text = html.unescape(html_report[0])
    code = json.loads((mask_sweep / "0" / "summary.json").read_text())["code"]
    assert code["version"] == "0.1.0"
    assert f'<p id="code">Code: {describe(code)}.</p>' in text
    [fixed] = re.findall(r'<details id="fixed">.*?<code>(.*?)</code>', text, re.S)
    shared = dict(item.split("=", 1) for item in fixed.split("; "))
    assert shared["data.seq_len"] == "32" and shared["objective.mask_token_prob"] == "0.8"
    assert "seed" not in shared and "objective.mask_rate" not in shared  # swept


@pytest.mark.slow
def test_curves_are_one_line_per_swept_value_with_the_seed_band(mask_sweep):
    """2 mask rates x 2 seeds: two lines, each the mean of its seeds between their min and max."""
    from selfsup.report import load_runs, swept_keys
    from selfsup.report.plot_data import curve_series

    runs = load_runs([str(mask_sweep)])
    series = curve_series(runs, "val/loss", "train/tokens_seen", swept_keys(runs))
    assert [s["label"] for s in series] == [  # the verdict's names of the settings; 2 seeds: their min-max
        "mlm mask_rate=0.1 (mean of 2 seeds, min-max band)",
        "mlm mask_rate=0.4 (mean of 2 seeds, min-max band)",
    ]
    for line, seeds in zip(series, (runs[:2], runs[2:])):
        curves = [dict(run.val_curve()) for run in seeds]
        assert line["x"] and all(set(line["x"]) <= set(c) for c in curves)
        for i, x in enumerate(line["x"]):
            values = [c[x] for c in curves]
            assert line["y"][i] == pytest.approx(sum(values) / 2)
            assert (line["low"][i], line["high"][i]) == (min(values), max(values))


@pytest.mark.slow
def test_the_wandb_report_has_the_local_reports_panels_over_the_sweeps_group(mask_sweep):
    """--wandb builds this Report (saving it needs the W&B server): the sweep's group as its run set, the loss,
    probe and per-mask-rate panels, and the same notes as the local report."""
    import wandb_workspaces.reports.v2 as wr

    from selfsup.report import COMPARISON_NOTE, build_wandb_report, load_runs, swept_keys

    runs = load_runs([str(mask_sweep)])
    report = build_wandb_report(runs, swept_keys(runs), "lab", "selfsup")
    [grid] = [b for b in report.blocks if isinstance(b, wr.PanelGrid)]
    [runset] = grid.runsets
    assert runset.name == wandb_run_record(mask_sweep / "0")["run_group"] and runset.project == "selfsup"
    titles = [getattr(p, "title", None) or "" for p in grid.panels]
    assert [p.table_name for p in grid.panels if isinstance(p, wr.WeavePanelSummaryTable)] == ["eval/predictions"]
    assert any(t.startswith("val loss against tokens seen") for t in titles)
    assert any(t.startswith("train loss against tokens seen") for t in titles)
    assert "final probe accuracy per mask rate (mean, min-max over seeds)" in titles
    assert not any("span length" in t for t in titles)  # one span length: nothing to compare
    assert any(isinstance(b, wr.MarkdownBlock) and b.text == COMPARISON_NOTE for b in report.blocks)


def test_a_users_task_is_in_the_closing_lines_the_sweep_table_the_report_and_the_verdict(cache_dir, tmp_path):
    """eval.tasks.order beside the built-in probe: its accuracy, margin and baselines wherever the probe's are."""
    import random

    rng = random.Random(0)
    words = "alpha beta gamma delta river stone cloud paper window green quick slow".split()
    with open(tmp_path / "order.jsonl", "w") as f:
        for i in range(300):
            ws = rng.sample(words, 6)
            f.write(json.dumps({"sentence": " ".join(ws) + f" {i}", "label": int(ws.index(min(ws)) < 3)}) + "\n")
    task = f"+eval.tasks.order={{source: text_files, paths: [{tmp_path / 'order.jsonl'}], text_field: sentence}}"
    root = tmp_path / "sweep"
    out = sweep(root, cache_dir, "logger=csv", task, "objective=clm")  # a sweep of one job: its table
    assert out.returncode == 0, out.stderr[-3000:]
    summaries = [json.loads((root / "0" / "summary.json").read_text())]
    evaluated = summaries[0]["eval"]
    from selfsup.results.summary import run_lines

    lines = run_lines(summaries[0])  # the closing lines of the run
    [line] = [line for line in lines if line.strip().startswith("order acc")]
    assert line.strip() == (
        f"order acc {evaluated['eval/order/accuracy']:.3f}  margin "
        f"{evaluated['eval/order/margin']:+.3f} [{evaluated['eval/order/margin_low']:+.3f}, "
        f"{evaluated['eval/order/margin_high']:+.3f}]  random-init "
        f"{evaluated['eval/order/random_init_accuracy']:.3f} +- "
        f"{evaluated['eval/order/random_init_accuracy_sd']:.3f}  majority "
        f"{evaluated['eval/order/majority_accuracy']:.3f}"
    )
    assert any(line.strip().startswith("order: ") for line in lines)  # the verdict scores it too
    headers = [line for line in out.stdout.splitlines() if line.startswith("job ")]  # the tables, split at 160
    columns = [c.strip() for line in headers for c in line.split("|")[2:]]
    assert columns.index("probe margin") + 2 == columns.index("order acc") + 1 == columns.index("order margin")
    made = report(root)
    assert made.returncode == 0, made.stderr[-3000:]
    text = (root / "report.html").read_text()
    runs = html_table(text)
    assert [r["order acc"] for r in runs] == [f"{s['eval']['eval/order/accuracy']:.4f}" for s in summaries]
    rows = html_table(text, "task-order")
    assert [r["majority"] for r in rows] == [f"{s['eval']['eval/order/majority_accuracy']:.4f}" for s in summaries]
    assert rows[0]["random-init"] == (
        f"{evaluated['eval/order/random_init_accuracy']:.4f} +- {evaluated['eval/order/random_init_accuracy_sd']:.4f}"
    )
    assert "order:" in text.split('<div id="verdict">', 1)[1].split("</div>", 1)[0]
    # the simple baseline beside it (TF-IDF + logistic regression): its accuracy and the run's difference
    tfidf = [evaluated[f"eval/order/tfidf_accuracy{end}"] for end in ("", "_low", "_high")]
    gap = [evaluated[f"eval/order/vs_tfidf{end}"] for end in ("", "_low", "_high")]
    assert tfidf[1] < tfidf[0] < tfidf[2] and gap[0] == pytest.approx(evaluated["eval/order/accuracy"] - tfidf[0])
    assert rows[0]["TF-IDF + LR [95%]"] == f"{tfidf[0]:.3f} [{tfidf[1]:.3f}, {tfidf[2]:.3f}]"
    assert rows[0]["vs TF-IDF [95%]"] == f"{gap[0]:+.3f} [{gap[1]:+.3f}, {gap[2]:+.3f}]"
    assert "order tf-idf" in columns


def _legend_outside(fig) -> None:
    """The legend is beside the axes: it covers none of the data."""
    [ax] = [a for a in fig.axes if a.get_legend()]
    fig.canvas.draw()
    legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes.x1 or legend.y1 <= axes.y0, (legend, axes)


def _baseline_artists(fig) -> dict[str, object]:
    """{gid: artist} of the baselines drawn (draw_baselines sets gid baseline:<kind>[:band])."""
    [ax] = fig.axes
    return {
        a.get_gid(): a for a in [*ax.lines, *ax.collections, *ax.patches] if (a.get_gid() or "").startswith("baseline:")
    }


def _band(artist) -> tuple[float, float]:
    """The data y range of a band: axhspan's rectangle, or fill_between's polygons."""
    if hasattr(artist, "get_height"):
        return artist.get_y(), artist.get_y() + artist.get_height()
    ys = [y for path in artist.get_paths() for y in path.vertices[:, 1]]
    return min(ys), max(ys)


@pytest.mark.slow
def test_each_plot_has_its_baselines_at_their_values_in_a_legend_beside_the_data(mask_sweep):
    """The knob plots of the mask sweep: probe (random-init band, majority), minimal pairs (random-init band,
    unigram, bigram), fixed exam (unigram loss, from the kinds of target), each at the runs' logged values."""
    import matplotlib.pyplot as plt

    from selfsup.report import load_runs, swept_keys
    from selfsup.report.figures import knob_figure
    from selfsup.report.plot_data import fixed_unigram_loss

    runs = load_runs([str(mask_sweep)])
    keys = swept_keys(runs)
    evaluated = runs[0].summary["eval"]
    expected = {
        "probe": {"random_init": "eval/probe/random_init_accuracy", "majority": "eval/probe/majority_accuracy"},
        "pairs": {
            "random_init": "eval/pairs/random_init_accuracy",
            "unigram": "eval/pairs/unigram_accuracy",
            "bigram": "eval/pairs/bigram_accuracy",
        },
        "fixed_loss": {"unigram": None},
    }
    for metric, kinds in expected.items():
        fig, scattered = knob_figure(runs, keys, "objective.mask_rate", {"mlm"}, metric, "t", "x", "y")
        assert not scattered  # a line over the mask rates
        try:
            artists = _baseline_artists(fig)
            assert {g.split(":")[1] for g in artists} == set(kinds), (metric, artists)
            for kind, key in kinds.items():
                want = fixed_unigram_loss(runs[0]) if key is None else evaluated[key]
                assert artists[f"baseline:{kind}"].get_ydata()[0] == pytest.approx(want), (metric, kind)
            if "random_init" in kinds:  # mean +- sd: the band's edges
                mean, sd = evaluated[kinds["random_init"]], evaluated[kinds["random_init"] + "_sd"]
                assert _band(artists["baseline:random_init:band"]) == pytest.approx((mean - sd, mean + sd))
            labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
            assert any(label.startswith("random-init") for label in labels) == ("random_init" in kinds)
            _legend_outside(fig)
        finally:
            plt.close(fig)
    fixed = runs[0].summary["eval"]
    assert fixed_unigram_loss(runs[0]) == pytest.approx(
        sum(
            fixed[f"eval/fixed/{k}/fraction"] * fixed[f"eval/fixed/{k}/unigram_loss"]
            for k in ("masked", "random", "unchanged")
        )
    )


@pytest.mark.slow
def test_a_plot_of_one_point_per_series_is_not_drawn(mask_sweep):
    """Evaluated once per run: probe accuracy against tokens seen would be one dot per setting."""
    from selfsup.report import load_runs, swept_keys
    from selfsup.report.figures import curves_figure

    runs = load_runs([str(mask_sweep)])
    fig, left_out = curves_figure(runs, "eval/probe/accuracy", "train/tokens_seen", "y", "x", "t", swept_keys(runs))
    assert fig is None and len(left_out) == 2


def _study(trials: list[dict]):
    import optuna
    from optuna.distributions import FloatDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", study_name="s")
    for i, attrs in enumerate(trials):
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": 0.1 * i},
                distributions={"x": FloatDistribution(0, 1)},
                value=0.5 + 0.01 * i,
                user_attrs=attrs,
            )
        )
    return study


def test_the_study_history_has_error_bars_and_the_random_init_band_and_does_without_them(tmp_path):
    import matplotlib.pyplot as plt

    from selfsup.report.figures import study_history_figure
    from selfsup.report.plots import plot_study

    fig = study_history_figure(_study([{"value_se": 0.02, "random_init": 0.48, "random_init_sd": 0.01}] * 3))
    artists = _baseline_artists(fig)
    assert artists["baseline:random_init"].get_ydata()[0] == pytest.approx(0.48)
    assert _band(artists["baseline:random_init:band"]) == pytest.approx((0.47, 0.49))
    [bars] = [c for c in fig.axes[0].containers if c.has_yerr]  # the trials' standard errors
    segments = bars.lines[2][0].get_segments()
    assert [s[1, 1] - s[0, 1] for s in segments] == pytest.approx([0.04] * 3)
    assert "random-init (mean ± sd)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    _legend_outside(fig)
    plt.close(fig)
    # an old study: no attrs; a trial's run dir gives its baseline (summary.json of its optimized_metric)
    run_dir = tmp_path / "0"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("optimized_metric: eval/probe/accuracy\n")
    (run_dir / "summary.json").write_text(
        json.dumps({"eval": {"eval/probe/random_init_accuracy": 0.51, "eval/probe/random_init_accuracy_sd": 0.02}})
    )
    fig = study_history_figure(_study([{"run_dir": str(run_dir)}, {}, {"run_dir": str(tmp_path / "gone")}]))
    assert _baseline_artists(fig)["baseline:random_init"].get_ydata()[0] == pytest.approx(0.51)
    assert not [c for c in fig.axes[0].containers if getattr(c, "has_yerr", False)]
    plt.close(fig)
    fig = study_history_figure(_study([{}, {}]))
    assert not _baseline_artists(fig)
    plt.close(fig)
    [(name, caption, png)] = plot_study(_study([{}]))  # one complete trial: no history to draw
    assert name == "optuna_history" and png == b"" and "not drawn" in caption


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_reader_sees_the_swept_columns_the_verdict_the_baselines_and_nothing_wider_than_the_page(
    html_report, mask_sweep, browser
):
    """The sweep's report in a real browser, 1,280 px wide."""
    facts = page_facts(browser, mask_sweep / "report.html")
    assert_fits(facts)
    assert {"objective.mask_rate", "seed", "probe margin", "tokens/s"} <= set(facts["headers"])
    assert facts["verdict"].startswith("Verdict (margin over random-init")
    shown = {f["id"]: f for f in facts["figures"]}
    assert set(shown) == {
        "val_loss_vs_tokens",
        "train_loss_vs_tokens",
        "fixed_loss_vs_mask_rate",
        "heldout_vs_mask_rate",
        "pairs_vs_mask_rate",
        "probe_vs_mask_rate",
    }
    for figure in facts["figures"]:  # every figure has its caption, in sentences that say what is drawn
        assert figure["caption"] and figure["caption"] == figure["alt"] and figure["caption"].endswith("."), figure
    # the verdict and the per-setting figures name the same settings, with the same words
    named = set(re.findall(r"mlm mask_rate=0\.\d", " ".join(facts["verdictItems"])))
    assert named == {"mlm mask_rate=0.1", "mlm mask_rate=0.4"}
    for name in ("fixed_loss_vs_mask_rate", "heldout_vs_mask_rate", "pairs_vs_mask_rate", "probe_vs_mask_rate"):
        caption = shown[name]["caption"]
        assert set(caption.split(" Settings: ")[1].removesuffix(".").split("; ")) == named, caption
        assert "Whiskers: each run's 95%" in caption and "the one the verdict reads" in caption
    for name, words in (
        ("probe_vs_mask_rate", ["random-init (mean, ± sd band)", "majority class"]),
        ("pairs_vs_mask_rate", ["random-init (mean, ± sd band)", "unigram", "bigram"]),
        ("fixed_loss_vs_mask_rate", ["unigram"]),
        ("heldout_vs_mask_rate", ["unigram"]),
    ):
        for figure_text in (shown[name]["alt"], shown[name]["caption"]):
            assert "Baselines: " in figure_text and all(w in figure_text.split("Baselines: ")[1] for w in words)
    assert any(
        line.startswith("Probe accuracy against tokens seen and training FLOPs: not drawn")
        for line in facts["notDrawn"]
    )


@pytest.mark.slow
def test_one_colour_per_setting_in_every_figure_and_each_run_drawn_with_the_verdicts_interval(mask_sweep):
    """setting_colors: a colour per setting (the verdict's names), the same in the curves and the knob plots; each
    run's point in a knob plot has the whiskers of the interval the verdict reads."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from selfsup.report import load_runs, swept_keys
    from selfsup.report.figures import curves_figure, knob_figure
    from selfsup.report.plot_data import setting_colors

    runs = load_runs([str(mask_sweep)])
    keys = swept_keys(runs)
    colors = setting_colors(runs, keys)
    assert list(colors) == ["mlm mask_rate=0.1", "mlm mask_rate=0.4"] and len(set(colors.values())) == 2
    fig, _ = curves_figure(runs, "val/loss", "train/tokens_seen", "y", "x", "t", keys)
    try:
        drawn = {line.get_label().split(" (")[0]: to_hex(line.get_color()) for line in fig.axes[0].get_lines()}
        assert {k: v for k, v in drawn.items() if k in colors} == colors
    finally:
        plt.close(fig)
    fig, _ = knob_figure(runs, keys, "objective.mask_rate", {"mlm"}, "pairs", "t", "x", "y")
    try:
        bars = [c for c in fig.axes[0].containers if c.lines[0].get_gid() == "interval"]
        assert len(bars) == 4  # one per run
        for bar, run in zip(bars, sorted(runs, key=lambda r: (r.config["objective.mask_rate"], r.label))):
            setting = f"mlm mask_rate={run.config['objective.mask_rate']}"
            assert to_hex(bar.lines[0].get_color()) == colors[setting]
            low, high = run.interval("eval/pairs/accuracy")
            evaluated = run.summary["eval"]
            margin = evaluated["eval/pairs/margin"]
            assert low == pytest.approx(evaluated["eval/pairs/accuracy"] - margin + evaluated["eval/pairs/margin_low"])
            [segments] = [c.get_segments() for c in bar.lines[2]]
            assert segments[0][:, 1].tolist() == pytest.approx([low, high])
    finally:
        plt.close(fig)
