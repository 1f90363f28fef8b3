"""The point recorder stays readable: PointRecorder.add, run for every request of a point,
is one short function that hands each concern to its own (issue 42: it was 106 lines)."""

import ast
import inspect

from benchc.metrics import recorder


def test_point_recorder_add_is_under_40_lines():
    (add,) = [n for n in ast.walk(ast.parse(inspect.getsource(recorder.PointRecorder)))
              if isinstance(n, ast.FunctionDef) and n.name == "add"]
    assert add.end_lineno - add.lineno + 1 < 40
