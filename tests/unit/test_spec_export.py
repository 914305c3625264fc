"""The spec schema as editors and readers get it: a JSON Schema and a key reference,
both from the validator's own declarations. Judged by the bundled specs (all valid)
and by the bad-input corpus of test_spec (every case whose fault is a shape, a type, a
range, a choice or an unknown key is refused by the JSON Schema too)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from experiments.cli.main import main
from experiments.spec.export import keys, keys_markdown, schema_text, spec_json_schema
from experiments.spec.load import SPECS_DIR, _Loader

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "spec_corpus", Path(__file__).with_name("test_spec.py")
)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

# Faults only the fabric or a rule across keys can reveal, which a JSON Schema cannot
# judge: names of the fabric's hosts, switches, servers and links; tenants, classes and
# faults that must agree with each other or the run; divisibility; files on disk.
NEEDS_KVFABRIC = {
    "noisy neighbour tenant",
    "fat tree k",
    "tenant_paths without tenants",
    "tenant host",
    "host in two tenants",
    "spines of unknown tenant",
    "spine that is a leaf",
    "qos class without share or priority",
    "qos tenant class unknown",
    "qos class both weighted and strict",
    "qos two classes at one priority",
    "qos tenant class list with an unknown class",
    "qos default class unknown",
    "qos shares above 1",
    "fault not a link",
    "fault both events",
    "fault no event",
    "fault after the run",
    "fault unknown node",
    "switch fault on a host",
    "flap beyond the run",
    "flap of no link",
    "degrade above the link's rate",
    "degrade below what can be shaped",
    "controller up while running",
    "controller down twice",
    "detection delay on a controller fault",
    "two detection delays on one link",
    "agent kill on a switch",
    "senders too many",
    "sender host",
    "receiver sends",
    "kv overlap",
    "kv tp",
    "moe dense model",
    "serving server",
    "serving overlap",
    "serving tp",
    "serving no decode",
    "two serving workloads",
    "serving trace missing",
    "serving token dist",
    "serving token range",
    "serving peaky share",
    "serving peaky window",
    "serving sessions context",
    "serving sessions turns",
    "sweep bad value",
    "sweep the name",
    "sweep missing list item",
}


def validator() -> jsonschema.Draft202012Validator:
    schema = spec_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", sorted(SPECS_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_bundled_spec_is_valid_under_the_json_schema(path):
    errors = list(validator().iter_errors(yaml.load(path.read_text(), Loader=_Loader)))
    assert not errors, [(list(e.absolute_path), e.message) for e in errors]


@pytest.mark.parametrize("case", corpus.GOOD, ids=[g[0] for g in corpus.GOOD])
def test_the_good_corpus_is_valid_under_the_json_schema(case):
    errors = list(validator().iter_errors(case[1]))
    assert not errors, [(list(e.absolute_path), e.message) for e in errors]


def _bad(case):
    name, base, path, value, _ = case
    spec = corpus.BASES[base]
    return (
        corpus._with(spec, path, delete=True)
        if value is corpus.DELETE
        else corpus._with(spec, path, value)
    )


def test_the_json_schema_refuses_the_bad_corpus_it_can_judge():
    v = validator()
    accepted = {case[0] for case in corpus.BAD if v.is_valid(_bad(case))}
    # What the schema lets through is what only kvfabric can check; anything else is a
    # key whose declaration lost its shape. The list is not empty: both halves are judged.
    judged = {case[0] for case in corpus.BAD} - NEEDS_KVFABRIC
    assert not accepted & judged, sorted(accepted & judged)
    assert len(judged) >= 30 and {case[0] for case in corpus.BAD} >= NEEDS_KVFABRIC


def test_every_key_has_a_line_of_doc():
    undocumented = [k.path for k in keys() if not k.doc]
    assert not undocumented
    paths = {k.path for k in keys()}
    assert "workloads.N[kind=incast].senders" in paths
    assert "workloads.N[kind=serving].arrivals.synthetic.rate_per_s" in paths
    assert "controller.qos.classes.N.rate_share" in paths


def test_the_reference_says_what_a_key_takes_and_defaults_to():
    by_path = {k.path: k for k in keys()}
    seed = by_path["seed"]
    assert (seed.takes, seed.default) == ("an integer ≥ 0", "`1`")
    assert by_path["name"].default == "required"
    policy = by_path["controller.policy"]
    assert "`ecmp`" in policy.takes and policy.default == '`"shortest_path"`'
    assert by_path["workloads.N[kind=incast].receiver"].takes == "a host of the fabric"


def test_committed_schema_and_reference_are_current():
    """``kvfabric spec schema --out`` / ``spec keys --out`` regenerate them."""
    assert (SPECS_DIR / "spec.schema.json").read_text() == schema_text()
    assert (SPECS_DIR / "KEYS.md").read_text() == keys_markdown()


def test_spec_schema_command_prints_the_schema(capsys):
    assert main(["spec", "schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "kvfabric experiment spec"


def test_a_tenant_may_keep_to_several_spines():
    """Found by the schema export: the spines list took ``True`` as its maximum length."""
    both = {"tenants": {"A": ["h0"]}, "spines": {"A": ["spine0", "spine1"]}}
    spec = corpus._with(corpus.BASES["incast"], "controller", both)
    assert corpus._load(spec).resolved["controller"]["spines"] == {"A": ["spine0", "spine1"]}
