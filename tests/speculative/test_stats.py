"""A generation's statistics: counted into a tally, frozen once at its end, unchanged after.

A consumer may keep the record it received (the history, `/metrics`, a client); nothing may
change it afterwards, and its serialised form is the one the mutable record had.
"""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, fields

import pytest

from localspec import Finished, GenerationRequest, Runtime, SpecMode, SpecSettings
from localspec.remote_stats import localspec_stats
from localspec.speculative.stats import GenerationStats, ProposerStats
from localspec.speculative.tally import StatsTally


def counted() -> StatsTally:
    """Two steps of n-gram drafting and a tuner's two choices."""
    tally = StatsTally(mode="auto", prompt_tokens=9)
    tally.record_step("ngram", drafted=3, accepted=2)
    tally.record_step("ngram", drafted=1, accepted=0)
    tally.record_timing(3, [4], decode_s=0.5, step_s=0.75, plain_s=0.5)
    tally.record_choice("ngram:3", 40.0)
    tally.record_choice("none", 20.0)
    return tally


def test_the_record_copies_the_tally_and_reads_as_it_did() -> None:
    tally = counted()
    stats = tally.freeze("stop", 1.5, step_profile={"plain": {"steps": 2.0}})
    tally.record_step("draft", drafted=5, accepted=5)
    tally.record_timing(0, [1], decode_s=0.1, step_s=0.2, plain_s=0.1)
    tally.record_choice("draft:5", 50.0)
    assert (stats.target_steps, stats.drafted, stats.accepted) == (2, 4, 2)
    assert stats.drafted_per_position == (2, 1, 1)
    assert stats.accepted_per_position == (1, 1, 0)
    assert dict(stats.by_proposer) == {"ngram": ProposerStats(2, 4, 2)}
    assert dict(stats.tuner_choices) == {"ngram:3": 1, "none": 1}
    assert stats.tuner_predicted_tokens_per_s == pytest.approx(30.0)
    assert dict(stats.decodes) == {"4": (1.0, 0.5)}
    assert (stats.finish_reason, stats.total_s, stats.mode) == ("stop", 1.5, "auto")


def test_every_tally_field_is_a_record_field() -> None:
    """`freeze` hands the tally's fields over by name."""
    record = {f.name for f in fields(GenerationStats)}
    assert {f.name for f in fields(StatsTally)} <= record


def test_the_record_and_what_it_holds_are_read_only() -> None:
    stats = counted().freeze("length", 1.0, step_profile={"plain": {"steps": 2.0}})
    with pytest.raises(FrozenInstanceError):
        stats.slot = 1  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        stats.by_proposer["ngram"].steps = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        stats.by_proposer["draft"] = ProposerStats()  # type: ignore[index]
    with pytest.raises(TypeError):
        stats.step_profile["plain"]["steps"] = 0.0  # type: ignore[index]
    with pytest.raises(TypeError):
        stats.decodes["4"][0] = 2.0  # type: ignore[index]
    assert isinstance(stats.drafted_per_position, tuple)


def test_a_record_built_from_lists_and_dicts_keeps_none_of_them() -> None:
    positions, choices = [3, 1], {"none": 2}
    stats = GenerationStats("auto", drafted_per_position=positions, tuner_choices=choices)
    positions.append(9)
    choices["none"] = 7
    assert stats.drafted_per_position == (3, 1) and dict(stats.tuner_choices) == {"none": 2}


def test_the_serialised_record_is_plain_json_and_reads_back() -> None:
    stats = counted().freeze("stop", 1.5, step_profile={"plain": {"steps": 2.0}})
    record = stats.to_dict()
    assert record["drafted_per_position"] == [2, 1, 1]
    assert record["by_proposer"] == {"ngram": {"steps": 2, "drafted": 4, "accepted": 2}}
    assert record["decodes"] == {"4": [1.0, 0.5]}
    assert record["step_profile"] == {"plain": {"steps": 2.0}}
    assert type(record["tuner_choices"]) is dict
    names = [f.name for f in fields(GenerationStats)]
    assert list(record)[: len(names)] == names  # the wire's order, as `asdict` gave it
    assert localspec_stats(json.loads(json.dumps(record))) == stats


def test_a_finished_generation_s_statistics_are_frozen(noisy: Runtime) -> None:
    prompt = noisy.prompts.tokenize("hello hello hello")
    request = GenerationRequest(prompt, max_tokens=8, spec=SpecSettings(SpecMode.NGRAM))
    done = list(noisy.generate(request))[-1]
    assert isinstance(done, Finished) and done.stats.generated_tokens == len(done.tokens)
    with pytest.raises(FrozenInstanceError):
        done.stats.generated_tokens = 0  # type: ignore[misc]
