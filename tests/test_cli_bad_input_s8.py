"""Defects found by the eighth session's new-user probe: ``plan``'s quadratic check of
suspect ratings, its advice for a node whose radar area underflows, unbounded model kwargs
and ``--rounds``, and the share cap's log level."""

from __future__ import annotations

import pytest
from conftest import fails


# ---------------------------------------------------------------- analyze: model kwargs
@pytest.mark.parametrize(
    ("model", "shape", "kwargs", "needle"),
    [
        ("mlp", "8,64", '{"hidden": 2.5}', "hidden must be an integer in [1, 100000000], got 2.5"),
        ("mlp", "8,64", '{"hidden": NaN}', "hidden must be an integer"),
        ("mlp", "8,64", '{"hidden": 1e30}', "hidden must be an integer"),
        ("mlp", "8,64", '{"hidden": true}', "hidden must be an integer"),
        ("mlp", "8,64", '{"hidden": "x"}', "hidden must be an integer"),
        ("mlp", "8,64", '{"hidden": 100000000000}', "hidden must be an integer in [1, 100000000]"),
        ("mlp", "8,64", '{"hidden": 100000}', "10,007,600,010 parameters, over the 100,000,000"),
        ("cnn", "8,1,28,28", '{"width": 1e30}', "width must be an integer"),
        ("cnn1d", "8,40", '{"width": 2.0}', "width must be an integer"),
        ("transformer", "8,64", '{"d_model": 1e9}', "d_model must be an integer"),
        ("resnet18", "2,3,32,32", '{"width": 4096}', "parameters, over the 100,000,000"),
        ("resnet18", "2,3,32,32", '{"small_input": 1}', "small_input must be a boolean"),
        ("mlp", "8,64", '{"hiden": 3}', "takes no keyword argument 'hiden'"),
    ],
)
def test_analyze_names_a_bad_model_kwarg(
    model: str, shape: str, kwargs: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a new-user probe: ``--model-kwargs '{"hidden": 2.5}'`` gave torch's TypeError
    from ``empty()``, and ``{"hidden": 100000000000}`` an allocator's out-of-memory error."""
    argv = ["analyze", model, "--input-shape", shape, "--model-kwargs", kwargs]
    line = fails(argv, capsys, needle)
    assert "the factory raised" not in line


def test_every_integer_kwarg_of_every_bundled_model_is_bounded() -> None:
    """Found by a new-user probe: each size of each bundled model is checked, by its name."""
    import inspect

    from flower_edge.errors import InputError
    from flower_edge.models import MAX_PARAMETERS, MODELS, build_model

    checked = 0
    for name, factory in MODELS.items():
        for key, param in inspect.signature(factory).parameters.items():
            if isinstance(param.default, bool) or not isinstance(param.default, int):
                continue
            for bad in (0, MAX_PARAMETERS + 1, 2.5, float("nan"), True, "8"):
                with pytest.raises(InputError, match=rf"^{key} must be an integer"):
                    build_model(name, **{key: bad})
            checked += 1
    assert checked == 18  # mlp 3, cnn 4, cnn1d 3, transformer 5, resnet18 3


def test_the_parameter_bound_leaves_the_bundled_models_as_they_were() -> None:
    """Found by a new-user probe: the meta-device count neither refuses nor reseeds a model."""
    import torch

    from flower_edge.models import MODELS, build_model

    for name, factory in MODELS.items():
        torch.manual_seed(0)
        direct = factory().state_dict()
        torch.manual_seed(0)
        built = build_model(name).state_dict()
        assert direct.keys() == built.keys()
        assert all(torch.equal(direct[k], built[k]) for k in direct), name
