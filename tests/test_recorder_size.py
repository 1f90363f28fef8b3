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
