"""The results' columns, named once: a summary.json key (or a metric) and its label, read by the end-of-sweep
table (selfsup.results.summary) and the report's runs table (selfsup.report.tables)."""

from __future__ import annotations

from selfsup.common.names import FIXED_LOSS, HELDOUT_BPB, PAIRS, PAIRS_MARGIN, PROBE

PROBE_MARGIN = "eval/probe/margin"

LABELS = {
    "job": "job",
    "run": "run",
    "objective": "objective",
    "architecture": "architecture",
    "parameters": "params",
    "steps": "steps",
    "flops_seen": "FLOPs",
    "targets_seen": "targets",
    "tokens_seen": "tokens seen",
    "val_loss": "val loss*",
    "val_perplexity": "val ppl",
    FIXED_LOSS: "fixed loss*",
    HELDOUT_BPB: "held-out bpb*",
    PAIRS: "pairs acc",
    PAIRS_MARGIN: "pairs margin",
    PROBE: "probe acc",
    PROBE_MARGIN: "probe margin",
    "signal_per_token": "signal/token",
    "tokens_per_sec": "tokens/s",
    "wall_seconds": "wall time",
    "status": "status",
    "data": "data",
}
# where the report, whose runs table is one, says which validation a value comes from
REPORT_LABELS = {**LABELS, "signal_per_token": "val signal/token"}

# the report's runs table: the run and its swept settings, then its scores (the user's tasks after the probe), then
# its cost (the report's second table, COST), its status and where its values were read
REPORT_SCORES = ["val_loss", "val_perplexity", FIXED_LOSS, HELDOUT_BPB, PAIRS, PAIRS_MARGIN, PROBE, PROBE_MARGIN]
REPORT_COST = ["signal_per_token", "tokens_seen", "flops_seen", "targets_seen", "tokens_per_sec", "wall_seconds"]
# the report's right-aligned columns
NUMERIC = {REPORT_LABELS[k] for k in REPORT_SCORES + REPORT_COST}
COST = tuple(REPORT_LABELS[k] for k in REPORT_COST)
