"""The point recorder stays readable: PointRecorder.add, run for every request of a point,
is one short function that hands each concern to its own (issue 42: it was 106 lines)."""

import ast
import inspect

from benchc.metrics import recorder


def test_point_recorder_add_is_under_40_lines():
    (add,) = [n for n in ast.walk(ast.parse(inspect.getsource(recorder.PointRecorder)))
              if isinstance(n, ast.FunctionDef) and n.name == "add"]
    assert add.end_lineno - add.lineno + 1 < 40


def test_a_points_tally_groups_its_counts_by_concern_at_most_20_fields_each():
    """Tally had 30 fields; its tokens (inputs, outputs, how counted, lengths checked) are one
    group of their own, and every class it is made of stays at 20 fields or fewer."""
    import dataclasses

    from benchc.metrics import aggregate

    groups = {f.name: f.type for f in dataclasses.fields(aggregate.Tally)}
    assert groups["tokens"] == "TokenCounts"
    for cls in (aggregate.Tally, aggregate.TokenCounts):
        assert len(dataclasses.fields(cls)) <= 20, cls.__name__
    # slotted: one is made per point and per shard, added field by field
    assert not hasattr(aggregate.TokenCounts(), "__dict__")


def test_no_record_class_has_more_than_20_fields_and_a_request_record_groups_them_by_concern():
    """RequestRecord was one slotted bag of 52 fields (issue 42); its fields sit in groups by
    concern, every dataclass of metrics/record.py at 20 fields or fewer, each slotted (one
    record and its groups are made per request on the load generator's path)."""
    import dataclasses

    from benchc.metrics import record

    classes = [c for c in vars(record).values()
               if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == record.__name__]
    assert record.RequestRecord in classes
    for cls in classes:
        assert len(dataclasses.fields(cls)) <= 20, (cls.__name__, len(dataclasses.fields(cls)))
        assert "__slots__" in vars(cls), cls.__name__
    assert len(classes) >= 6
    groups = {f.name: f.type for f in dataclasses.fields(record.RequestRecord)}
    assert {k: groups[k] for k in ("times", "tokens", "cache", "payload", "outcome", "place")} == {
        "times": "Times", "tokens": "Tokens", "cache": "CacheUse", "payload": "Payload",
        "outcome": "Outcome", "place": "SessionPlace | None"}
    # a session's place is made only for a session's request; the others with every record
    r = record.RequestRecord("r", 0, 1, None)
    assert r.place is None and r.times is not record.RequestRecord("s", 0, 1, None).times
