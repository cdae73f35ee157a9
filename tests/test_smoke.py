import pytest

from flower_edge import models, wire
from flower_edge.cli import main
from flower_edge.errors import InputError


def test_wire_keys_are_unique_and_hyphenated() -> None:
    keys = {k: v for k, v in vars(wire).items() if k.isupper() and isinstance(v, str)}
    assert len(set(keys.values())) == len(keys) - 1  # PROFILE_ACTION and PROFILE share "profile"
    assert all("_" not in v for v in keys.values())


@pytest.mark.parametrize(
    ("name", "shape"), [("mlp", (4, 64)), ("cnn", (4, 1, 8, 8)), ("cnn1d", (4, 40))]
)
def test_bundled_models_run(name: str, shape: tuple[int, ...]) -> None:
    import torch

    out = models.build_model(name)(torch.zeros(shape))
    assert out.shape == (4, 10)


def test_unknown_model_lists_valid_names() -> None:
    with pytest.raises(InputError, match="bundled models: .*mlp"):
        models.build_model("nope")


def test_cli_requires_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
