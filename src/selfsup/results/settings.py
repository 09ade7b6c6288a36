"""The settings that made each evaluated score: recorded by selfsup-eval beside every evaluation (evaluated.json's
`evaluations[].settings`, per part: eval/<task>, eval/<job>, eval/pairs, eval/lm_eval/<task>), shown by the report
next to each score, and never pooled by the verdict: runs whose scores of a part were made under different settings
are judged on separate lines, each named by the settings that differ."""

from __future__ import annotations

import json

from selfsup.results.groups import Group, run_margin

FAMILY_SETTINGS = {"backend"}  # lm-eval's backend: causal for a decoder, seq2seq for an encoder-decoder


def part_of(key: str) -> str:
    """eval/<task>/... -> eval/<task>; each lm-eval task is a part of its own: eval/lm_eval/<task>."""
    parts = key.split("|")[0].split("/")
    return "/".join(parts[: 3 if parts[1:2] == ["lm_eval"] else 2])


def part_settings(evaluations: list[dict]) -> dict[str, dict]:
    """{part: the settings of the newest evaluation that scored it} (an evaluation's scores replace the part's)."""
    found: dict[str, dict] = {}
    for evaluation in evaluations:
        found.update(evaluation.get("settings") or {})
    return found


def brief(settings: dict | None) -> str:
    """A part's settings in a few words, for a table cell."""
    if not settings:
        return "-"
    s = settings
    if "backend" in s:  # lm-eval's
        shots = f", {s.get('num_fewshot')}-shot" if s.get("num_fewshot") else ""
        limit = f", limit {s['limit']}" if s.get("limit") is not None else ""
        return f"lm-eval {s.get('version')} ({s.get('backend')}){shots}{limit}, documents {str(s.get('examples'))[:8]}"
    if s.get("protocol") == "finetune":
        words = f"finetune {s.get('steps')} steps x {s.get('seeds')} seeds, lr {s.get('lr')}, max_length {s.get('max_length')}"
    elif s.get("protocol"):
        words = f"linear probe, max_length {s.get('max_length')}"
    else:
        return ", ".join(f"{k} {v}" for k, v in s.items())
    words += f", random-init {s.get('random_init_seeds')} seeds, {s.get('train_examples')} train / {s.get('test_examples')} test"
    return words + (f", max_new_tokens {s['max_new_tokens']}" if s.get("max_new_tokens") else "")


def by_settings(groups: list[Group], key: str) -> list[tuple[str, list[Group]]]:
    """[(suffix, groups)]: the groups' runs of score `key` split by the settings that made it (part_settings); one
    ("", groups) where they agree; else one entry per settings, its suffix naming the settings that differ."""
    part = part_of(key)

    def signature(row: dict) -> str:
        settings = (row.get("part_settings") or {}).get(part)
        if isinstance(settings, dict):  # what follows from the run's family is not a setting: compared as scorers are
            settings = {k: v for k, v in settings.items() if k not in FAMILY_SETTINGS}
        return json.dumps(settings, sort_keys=True, default=str)

    found = list(dict.fromkeys(signature(r) for g in groups for r in g.rows if run_margin(r, key) is not None))
    if len(found) <= 1:
        return [("", groups)]
    settings = [json.loads(s) or {} for s in found]
    differ = [
        k for k in dict.fromkeys(k for s in settings for k in s) if len({json.dumps(s.get(k)) for s in settings}) > 1
    ]
    out = []
    for sig, s in zip(found, settings):
        named = ", ".join(f"{k}={s.get(k)}" for k in differ) if s else "settings not recorded"
        split = [Group(g.label, [r for r in g.rows if signature(r) == sig]) for g in groups]
        out.append((f" ({named})", [g for g in split if g.rows]))
    return out
