"""User story: a step's extra columns and its score statistics reach the collector's outputs.

Three sources validate one step through the real SDK and OTLP into the built collector: two in
blocks, one in block-less calls (each sending an end record with the cumulative counts). Each
keeps only its bottom-k, so the kept records carry a few of the scores; the step summary must
still count and add up every valid score the sources saw, and the kept records must carry their
own extra columns, to the file, to Loki's stand-in and through ``otel-valgen show``.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.cli.main import main as cli_main
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import Record, StandIn, records_of_file, wait_for

RUN_ID = "richer-rows"
K = 6
SEED = 11
STEP = 40
SOURCES = 3


def _batch(rng: random.Random, source: str, start: int, n: int) -> dict[str, Any]:
    """One call's columns: scores with some invalid values, and four extra columns (a few values invalid)."""
    ids = [f"{source}-{i:03d}" for i in range(start, start + n)]
    scores: list[Any] = [rng.choice([rng.uniform(-1, 2), None, math.nan, "n/a"]) for _ in ids]
    extra = {
        "acc": [rng.choice([0.0, 1.0, math.inf]) for _ in ids],
        "format_ok": [rng.random() < 0.5 for _ in ids],
        "judge": [f"verdict of {i}" for i in ids],
        "tokens": [rng.randrange(1, 4000) for _ in ids],
    }
    return {"ids": ids, "scores": scores, "extra": extra}


def _valid(score: Any) -> bool:
    return isinstance(score, float) and math.isfinite(score)


def _emit(endpoint: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Log the step from three sources; return every call's columns and each sample id's extra values."""
    rng = random.Random(3)
    vg.configure(run_id=RUN_ID, count=K, seed=SEED, endpoint=endpoint)
    calls: list[dict[str, Any]] = []

    def log(source: str, start: int, n: int, **kwargs: Any) -> None:
        call = _batch(rng, source, start, n)
        calls.append(call)
        accepted = vg.log_generations(
            [f"question {i}" for i in call["ids"]],
            [f"answer {i}" for i in call["ids"]],
            call["scores"],
            sample_ids=call["ids"],
            extra=call["extra"],
            source=source,
            **kwargs,
        )
        assert accepted == n

    for source, sizes in (("trainer", (40, 25, 35)), ("rollouter", (30, 1))):
        with vg.validation(step=STEP, source=source):
            start = 0
            for n in sizes:
                log(source, start, n)
                start += n
    start = 0
    for n in (20, 12, 18):  # block-less parts: three end records with cumulative counts
        log("task", start, n, step=STEP)
        start += n
    assert vg.end_step(STEP, source="task")
    values = {
        f"{sample_id}/0": {name: column[i] for name, column in call["extra"].items()}
        for call in calls
        for i, sample_id in enumerate(call["ids"])
    }
    return calls, values


def _sent_extra(values: dict[str, Any]) -> dict[str, Any]:
    """The extra values the SDK sends of one generation: the invalid ones (inf) left out."""
    return {name: value for name, value in values.items() if not (isinstance(value, float) and math.isinf(value))}


def _kept(records: list[Record]) -> list[Record]:
    kept = [r for r in records if r.event == contract.EVENT_GENERATION and contract.RANK in r.attributes]
    return sorted(kept, key=lambda r: r.attributes[contract.RANK])


def _summaries(records: list[Record]) -> list[dict[str, Any]]:
    return [r.attributes for r in records if r.event == contract.EVENT_STEP_SUMMARY]


@pytest.mark.timeout(120)
def test_extra_columns_and_score_statistics_reach_every_output(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """Summary: count and sum of every valid score seen; kept records: their own extra values; show: both."""
    collector = start_collector(
        "collector",
        ["collector.yaml"],
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            # No sources_expected: the step closes complete after this much silence, once every
            # part arrived (with it, the first block-less part would complete the step early).
            "VALGEN_DECISION_WAIT": "2s",
        },
    )
    calls, values = _emit(f"http://{collector.http_endpoint}")
    vg.shutdown()
    wait_for(lambda: bool(_summaries(records_of_file(collector.file_path))), 30, "the step summary in the file")
    records = records_of_file(collector.file_path)

    # The summary: an independent count and sum over every generation of every call.
    valid = [score for call in calls for score in call["scores"] if _valid(score)]
    seen = sum(len(call["ids"]) for call in calls)
    (summary,) = _summaries(records)
    assert summary[contract.CLOSED_REASON] == "complete", summary
    assert summary[contract.SEEN] == seen
    assert summary[contract.SOURCES_ENDED] == SOURCES
    assert summary[contract.SCORE_COUNT] == len(valid)
    assert summary[contract.SCORE_SUM] == pytest.approx(math.fsum(valid), rel=1e-12)
    assert summary[contract.SCORE_MEAN] == pytest.approx(math.fsum(valid) / len(valid), rel=1e-12)
    assert 0 < len(valid) < seen, "some scores were invalid, and left out"

    # The kept records: the bottom-k of everything, each with its own extra values (inf left out).
    kept = _kept(records)
    every_id = list(values)
    expected_ids = [i for _, i in bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in every_id), K)]
    assert [untagged(r.attributes[contract.SAMPLE_ID]) for r in kept] == expected_ids
    kept_scores = [r.attributes[contract.SCORE] for r in kept if contract.SCORE in r.attributes]
    assert len(kept_scores) < summary[contract.SCORE_COUNT], "the statistics are not those of the kept records"
    for record in kept:
        got = {
            key[len(contract.EXTRA_PREFIX) :]: value
            for key, value in record.attributes.items()
            if key.startswith(contract.EXTRA_PREFIX)
        }
        assert got == _sent_extra(values[untagged(record.attributes[contract.SAMPLE_ID])])

    # Loki gets the same attributes (it stores them as structured metadata, valgen_extra_*).
    wait_for(lambda: len(_kept(loki_stand_in.records())) == K, 30, "the kept records at Loki")
    for at_loki, in_file in zip(_kept(loki_stand_in.records()), kept, strict=True):
        assert at_loki.attributes == in_file.attributes

    # otel-valgen show reads the collector's file: the summary's statistics, the extra columns.
    result = CliRunner().invoke(cli_main, ["show", str(collector.file_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    (shown,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert (shown["score_count"], shown["score_sum"], shown["score_mean"]) == (
        summary[contract.SCORE_COUNT],
        summary[contract.SCORE_SUM],
        summary[contract.SCORE_MEAN],
    )
    assert [untagged(g["sample_id"]) for g in shown["generations"]] == expected_ids
    for generation in shown["generations"]:
        sent = _sent_extra(values[untagged(generation["sample_id"])])
        assert generation["extra"] == {name: sent.get(name) for name in ("acc", "format_ok", "judge", "tokens")}
