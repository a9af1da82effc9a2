"""The concurrency bench reports the recogniser's work from the server's Moonshine counters (`/metrics`):
what grew during the run, by class, and decodes per utterance; nothing when the counters are not there."""

from __future__ import annotations

from tools.bench.concurrency import asr_work


def counters(urgent: int, commit: int, speculative: int, cpu: float, guessed: int, decoded: int
             ) -> dict[str, float]:
    out = {}
    for name, count in (("urgent", urgent), ("commit", commit), ("speculative", speculative)):
        out[f'wren_asr_decodes_total{{class="{name}"}}'] = count
        out[f'wren_asr_decode_cpu_seconds_total{{class="{name}"}}'] = cpu * count
    out['wren_asr_utterance_ends_total{words="guessed"}'] = guessed
    out['wren_asr_utterance_ends_total{words="decoded"}'] = decoded
    return out


def test_the_run_s_decodes_are_what_grew_and_are_counted_per_utterance() -> None:
    before = counters(urgent=2, commit=0, speculative=5, cpu=0.1, guessed=4, decoded=2)
    after = counters(urgent=5, commit=1, speculative=25, cpu=0.1, guessed=20, decoded=5)
    work = asr_work(before, after, utterances=20)
    assert work is not None
    assert work["urgent"] == {"decodes": 3, "cpu_s": 0.3}
    assert work["speculative"] == {"decodes": 20, "cpu_s": 2.0}
    assert work["ends_guessed"] == 16 and work["ends_decoded"] == 3
    assert work["decodes_per_utterance"] == 1.2  # (3 + 1 + 20) / 20


def test_a_server_without_moonshine_counters_reports_no_recogniser_work() -> None:
    assert asr_work({}, {}, utterances=10) is None
    assert asr_work({"wren_build_info{}": 1}, {"wren_build_info{}": 1}, utterances=10) is None
