"""Which dimensions of a view a block size sets: read from the slice or ``view`` call that builds it, so that a
trial block widens its own axis and never a singleton axis of the tensor that happens to equal the old block."""

from pypto_tune.tools.search.view_dims import fed_dims

KERNEL = """import pypto


def kernel(x, y, out, cfg):
    rows = 1
    steps = x.shape[0] // rows
    for i in pypto.loop(steps):
        lo = i * rows
        hi = (i + 1) * rows
        a = x[lo:hi, ...]
        b = y[:, lo:hi, :, 0:256]
        c = pypto.view(x, [cfg.block, 32, 1, 256], [i * cfg.block, 0, 0, 0])
        d = x[lo:hi, 0]
        pypto.assemble(a + b + c + d, [lo, 0, 0, 0], out)
"""


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_slice_through_a_local_computed_from_the_block_sets_that_axis_only():
    # x[lo:hi, ...] on a (32, 32, 1, 256) tensor: a view [1, 32, 1, 256] whose axis 2 is also 1
    assert fed_dims(KERNEL, _line(KERNEL, "a = x["), 4, {"rows"}) == {0}
    assert fed_dims(KERNEL, _line(KERNEL, "b = y["), 4, {"rows"}) == {1}


def test_a_view_calls_shape_and_a_config_field_are_read_the_same_way():
    assert fed_dims(KERNEL, _line(KERNEL, "c = pypto.view"), 4, {"block"}) == {0}


def test_what_cannot_be_mapped_onto_the_views_dims_is_unknown_not_guessed():
    assert fed_dims(KERNEL, _line(KERNEL, "d = x["), 3, {"rows"}) is None  # an index drops a dimension
    assert fed_dims(KERNEL, _line(KERNEL, "steps ="), 4, {"rows"}) is None  # no view on the line
    assert fed_dims(KERNEL, _line(KERNEL, "a = x["), 4, {"other"}) is None  # no dim is the block's
    assert fed_dims("def broken(:", 1, 4, {"rows"}) is None
