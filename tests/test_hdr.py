"""The HdrHistogram recorder on both cores: layout, figures, merge, and interop with the
`hdrhistogram` package (the reference implementation on PyPI) in both directions."""

import random

import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st

from benchc.metrics._hdr_codec import HdrFormatError
from tests.conftest import both_cores

HIGH = 3_600_000_000


def values(seed=1, n=20_000):
    rng = random.Random(seed)
    return [int(rng.lognormvariate(8, 2)) + 1 for _ in range(n)]


def test_figures_match_the_reference_package(hdr_module):
    h, ref = hdr_module.Histogram(1, HIGH, 3), HdrHistogram(1, HIGH, 3)
    for v in values():
        assert h.record(v)
        ref.record_value(v)
    assert h.total_count == ref.get_total_count() == 20_000
    assert (h.min, h.max) == (ref.get_min_value(), ref.get_max_value())
    assert h.mean == ref.get_mean_value() and h.stdev == ref.get_stddev()
    for p in (0, 1, 50, 90, 95, 99, 99.9, 99.99, 100):
        assert h.value_at_percentile(p) == ref.get_value_at_percentile(p), p


def test_encoding_is_byte_identical_and_decodes_both_ways(hdr_module):
    h, ref = hdr_module.Histogram(1, HIGH, 3), HdrHistogram(1, HIGH, 3)
    for v in values(2):
        h.record(v)
        ref.record_value(v)
    text = h.encode()
    assert text.startswith("HISTFAAA") and text == ref.encode().decode()
    theirs = HdrHistogram.decode(text)
    assert theirs.get_total_count() == h.total_count
    assert theirs.get_value_at_percentile(99) == h.value_at_percentile(99)
    ours = hdr_module.Histogram.decode(ref.encode())
    assert ours.nonzero() == h.nonzero()
    empty = hdr_module.Histogram()
    assert hdr_module.Histogram.decode(empty.encode()).total_count == 0


def test_out_of_range_is_counted_never_dropped(hdr_module):
    h = hdr_module.Histogram(1, HIGH, 3)
    assert h.record(HIGH) and not h.record(HIGH * 2) and not h.record(-1, 3)
    assert (h.total_count, h.out_of_range) == (1, 4)


def test_merge_equals_one_histogram_fed_everything(hdr_module):
    vs = values(3, 5000)
    a, b, whole = hdr_module.Histogram(), hdr_module.Histogram(), hdr_module.Histogram()
    for i, v in enumerate(vs):
        (a if i % 2 else b).record(v)
        whole.record(v)
    a.merge(b)
    assert a.nonzero() == whole.nonzero() and a.total_count == whole.total_count
    with pytest.raises(ValueError, match="same range"):
        a.merge(hdr_module.Histogram(1, 1000, 3))


def test_corrupt_encodings_raise_a_clear_error(hdr_module):
    for bad in ("not base64!", "SElTVA==", "HISTFAAAAA=="):
        with pytest.raises(HdrFormatError):
            hdr_module.Histogram.decode(bad)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=-5, max_value=HIGH * 2), st.integers(1, 5)), max_size=200),
       st.sampled_from([1, 2, 3, 4]))
def test_cores_agree_on_any_values(pairs, digits):
    results = []
    for mod in both_cores("benchc.metrics._hdr"):
        h = mod.Histogram(1, HIGH, digits)
        for v, c in pairs:
            h.record(v, c)
        results.append((h.total_count, h.out_of_range, h.min, h.max, h.mean, h.stdev, h.nonzero(),
                        [h.value_at_percentile(p) for p in (0, 50, 99, 100)], h.encode()))
    assert all(r == results[0] for r in results)
