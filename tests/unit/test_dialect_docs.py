"""docs/dialects.md is generated from the op definitions and kept up to date."""

from __future__ import annotations

import functools

from pkc.tools import dialect_docs

render = functools.cache(dialect_docs.render)  # one rendering for the tests below


def test_committed_reference_is_up_to_date():
    text = render()
    committed = dialect_docs.OUTPUT.read_text(encoding="utf-8")
    assert committed == text, (
        "docs/dialects.md is out of date with the op definitions: "
        "run `python -m pkc.tools.dialect_docs` and commit the result"
    )


def test_every_op_and_type_of_every_pkc_dialect_is_documented():
    text = render()
    dialects = {d.name: d for d in dialect_docs.pkc_dialects()}
    assert {"pk", "ptx"} <= set(dialects)  # and any new one (pks, ...) as it lands
    for d in dialects.values():
        assert f"## Dialect `{d.name}`" in text
        for op in d.operations:
            assert f"### `{op.name}`" in text, op.name
        for attr in d.attributes:
            assert f"### `{attr.name}`" in text, attr.name


def test_verifier_rules_come_from_the_verifiers():
    from pkc.dialects.graph import AllReduceOp
    from pkc.dialects.kernel import WorkerOp

    rules = dialect_docs.verifier_rules(AllReduceOp)
    assert any("world size must be between 1 and" in r for r in rules)  # via helpers
    assert any("sms = {self.sm_count} is more than any GPU has" in r
               for r in dialect_docs.verifier_rules(WorkerOp))
