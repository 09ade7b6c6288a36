"""The console's and the Markdown report's tables fit their widths: too many columns split into several tables
(each repeating the columns that tell the rows apart), a too-long text cut with '…'."""

from selfsup.report.render import MD_WIDTH, _md_table
from selfsup.results.summary import TABLE_WIDTH, summary_table


def test_a_sweep_with_many_tasks_prints_tables_within_160_columns_each_naming_the_jobs():
    tasks = {f"eval/task_{i}/{k}": 0.5 for i in range(6) for k in ("accuracy", "margin", "margin_low", "margin_high")}
    rows = [
        {"status": "finished", "objective": o, "run_dir": f"s/{j}", "val_loss": 4.0, "eval": dict(tasks)}
        for j, o in enumerate(("mlm", "span_corruption"))
    ]
    text = summary_table(rows)
    lines = text.splitlines()
    assert max(map(len, lines)) <= TABLE_WIDTH
    headers = [line for line in lines if line.startswith("job ")]
    assert len(headers) > 2 and all(h.split(" | ")[1].strip() == "objective" for h in headers)
    assert all(f"task_{i}" in text for i in range(6))  # every column shown, in one of the tables


def test_markdown_rows_of_long_predictions_fit_200_columns_and_keep_every_row():
    header = ["run", "example", "input", "target", "prediction", "accuracy"]
    words = "|".join(f"word{i}" for i in range(24))
    rows = [[str(r), str(e), "x " * 120 + "end", words, words, "0.5"] for r in range(3) for e in range(2)]
    lines = _md_table(header, rows)
    assert lines and max(map(len, lines)) <= MD_WIDTH
    tables = [lines[i : i + 2 + len(rows)] for i, line in enumerate(lines) if line.startswith("| run | example |")]
    assert len(tables) > 1 and all(len(t) == 2 + len(rows) for t in tables)  # each table: every row
    assert [t[2].split(" | ")[:2] for t in tables] == [["| 0", "0"]] * len(tables)
    assert any(line.endswith("… |") for line in lines)  # a text cut to fit says so
    assert "\\|" in "".join(lines)  # the targets' separators escaped, not read as cells
