"""Bundled models, by name, for the CLI, the examples and the simulations.

Every factory takes keyword arguments only and returns a fresh ``torch.nn.Module`` whose
parameters are initialised from torch's global RNG (seed it for reproducible weights).

===============  =========================================  ==============================
name             what                                       input
===============  =========================================  ==============================
``mlp``          2 hidden layers, ReLU                      ``(N, in_features)``
``cnn``          2 conv + BatchNorm + max-pool, then linear ``(N, C, H, W)``
``cnn1d``        1-D conv net for MNIST-1D                  ``(N, in_features)``
``transformer``  one pre-norm transformer block (multi-head ``(N, seq_len)``, or any
                 self-attention + MLP) over the features as ``(N, ...)`` with ``seq_len``
                 a sequence of scalars, mean-pooled         elements per sample
``resnet18``     ResNet-18 (BasicBlock x [2, 2, 2, 2],      ``(N, C, H, W)``
                 11.2M parameters at width 64), plain torch
===============  =========================================  ==============================
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Final

import torch
from torch import nn

from flower_edge import validate
from flower_edge.errors import InputError

__all__ = [
    "MAX_PARAMETERS",
    "MODELS",
    "CNN",
    "CNN1D",
    "MLP",
    "ResNet18",
    "TransformerClassifier",
    "build_model",
]


class MLP(nn.Module):
    """Multi-layer perceptron classifier.

    Parameters
    ----------
    in_features : int (default: 64)
        Input features (64 for scikit-learn's 8x8 digits, 40 for MNIST-1D).
    hidden : int (default: 64)
        Width of the two hidden layers.
    num_classes : int (default: 10)
        Output classes.
    """

    def __init__(self, in_features: int = 64, hidden: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return class logits."""
        out: torch.Tensor = self.net(x)
        return out


class CNN(nn.Module):
    """Small convolutional classifier with BatchNorm and max-pooling.

    Parameters
    ----------
    in_channels : int (default: 1)
        Input channels.
    image_size : int (default: 8)
        Height and width of the square input (8 for digits, 28 for MNIST-sized images).
    num_classes : int (default: 10)
        Output classes.
    width : int (default: 16)
        Channels of the first convolution (the second has twice as many).
    """

    def __init__(
        self, in_channels: int = 1, image_size: int = 8, num_classes: int = 10, width: int = 16
    ) -> None:
        super().__init__()
        validate.integer("image_size", image_size, low=4, error=InputError)
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, kernel_size=3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(2 * width * side * side, num_classes))
        self.in_channels = in_channels
        self.image_size = image_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return class logits; flat inputs are reshaped to ``(N, C, H, W)``."""
        if x.dim() == 2:
            x = x.view(x.shape[0], self.in_channels, self.image_size, self.image_size)
        out: torch.Tensor = self.head(self.features(x))
        return out


class CNN1D(nn.Module):
    """1-D convolutional classifier (MNIST-1D: 40 features, 10 classes).

    Parameters
    ----------
    in_features : int (default: 40)
        Length of the 1-D signal.
    num_classes : int (default: 10)
        Output classes.
    width : int (default: 32)
        Channels of the convolutions.
    """

    def __init__(self, in_features: int = 40, num_classes: int = 10, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, width, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.Conv1d(width, width, kernel_size=3, padding=1, stride=2),
            nn.ReLU(),
            nn.Conv1d(width, width, kernel_size=3, padding=1, stride=2),
            nn.ReLU(),
        )
        length = (in_features + 1) // 2
        length = (length + 1) // 2
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(width * length, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return class logits; ``(N, L)`` inputs get a channel dimension."""
        if x.dim() == 2:
            x = x.unsqueeze(1)
        out: torch.Tensor = self.head(self.features(x))
        return out


class TransformerClassifier(nn.Module):
    """A small transformer classifier: one pre-norm encoder block with self-attention.

    The input's features are read as a sequence of ``seq_len`` scalars, each embedded by a
    linear map plus a learned position embedding, passed through one block (multi-head
    self-attention and a ReLU MLP, each with a residual and a LayerNorm), mean-pooled and
    classified.

    Parameters
    ----------
    seq_len : int (default: 64)
        Elements per sample (64 for scikit-learn's digits, 40 for MNIST-1D).
    d_model : int (default: 32)
        Embedding width; a multiple of ``heads``.
    heads : int (default: 4)
        Attention heads.
    ffn : int (default: 64)
        Hidden width of the MLP.
    num_classes : int (default: 10)
        Output classes.
    """

    def __init__(
        self,
        seq_len: int = 64,
        d_model: int = 32,
        heads: int = 4,
        ffn: int = 64,
        num_classes: int = 10,
    ) -> None:
        super().__init__()
        if d_model % heads:
            raise InputError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
        self.seq_len = seq_len
        self.embed = nn.Linear(1, d_model)
        self.position = nn.Parameter(torch.zeros(1, seq_len, d_model))
        nn.init.normal_(self.position, std=0.02)
        self.block = nn.TransformerEncoderLayer(
            d_model, heads, ffn, dropout=0.0, batch_first=True, norm_first=True
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return class logits; any ``(N, ...)`` input with ``seq_len`` elements per sample."""
        x = x.reshape(x.shape[0], -1)
        if x.shape[1] != self.seq_len:
            raise InputError(
                f"input has {x.shape[1]} elements per sample, the model expects "
                f"seq_len={self.seq_len}"
            )
        h = self.embed(x.unsqueeze(-1)) + self.position
        h = self.norm(self.block(h))
        out: torch.Tensor = self.head(h.mean(dim=1))
        return out


class _BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions with BatchNorm and a residual."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))``."""
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        result: torch.Tensor = self.relu(out + self.shortcut(x))
        return result


class ResNet18(nn.Module):
    """ResNet-18 (He et al., 2016) in plain torch: BasicBlocks ``[2, 2, 2, 2]``.

    Parameters
    ----------
    in_channels : int (default: 3)
        Input channels.
    num_classes : int (default: 10)
        Output classes.
    width : int (default: 64)
        Channels of the first stage (doubled at each of the next three).
    small_input : bool (default: True)
        3x3 stride-1 stem without max-pooling (CIFAR-sized inputs); ``False``: the ImageNet
        stem, a 7x7 stride-2 convolution and a 3x3 stride-2 max-pool.
    """

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        width: int = 64,
        small_input: bool = True,
    ) -> None:
        super().__init__()
        if small_input:
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            )
        else:
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
        stages: list[nn.Module] = []
        c_in = width
        for i in range(4):
            c_out = width * 2**i
            stride = 1 if i == 0 else 2
            stages.append(
                nn.Sequential(_BasicBlock(c_in, c_out, stride), _BasicBlock(c_out, c_out, 1))
            )
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return class logits for ``(N, C, H, W)`` images."""
        h = self.pool(self.stages(self.stem(x)))
        out: torch.Tensor = self.head(torch.flatten(h, 1))
        return out


#: name -> factory
MODELS: dict[str, Callable[..., nn.Module]] = {
    "mlp": MLP,
    "cnn": CNN,
    "cnn1d": CNN1D,
    "transformer": TransformerClassifier,
    "resnet18": ResNet18,
}


#: the most parameters a bundled model may have (400 MB of float32 weights, 9x ResNet-18);
#: also the bound of each integer keyword argument: every size alone adds at least as many
#: parameters (and ``heads`` divides ``d_model``)
MAX_PARAMETERS: Final = 10**8


def _check_kwargs(
    name: str, factory: Callable[..., nn.Module], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Check each keyword argument against the factory's signature and its bounds.

    Return the arguments with each integer one as an ``int`` (``--model-kwargs`` is JSON, whose
    writers may emit ``64.0`` for ``64``).
    """
    accepted = inspect.signature(factory).parameters
    out = dict(kwargs)
    for key, value in kwargs.items():
        if key not in accepted:
            raise InputError(
                f"{name} takes no keyword argument {key!r}; it takes {', '.join(accepted)}"
            )
        default = accepted[key].default
        if isinstance(default, bool):
            validate.boolean(key, value, error=InputError)
        elif isinstance(default, int):
            out[key] = validate.integer(
                key, value, low=1, high=MAX_PARAMETERS, integral_float=True, error=InputError
            )
    return out


def build_model(name: str, **kwargs: Any) -> nn.Module:
    """Build a bundled model by name.

    Every integer keyword argument is a size or a count (features, classes, widths, heads):
    an integer in ``[1, MAX_PARAMETERS]`` (a whole float such as ``2.0`` is taken as ``2``;
    not ``2.5``, nor a ``bool``); a flag such as ``small_input`` is a ``bool``. The model is
    first built on torch's ``meta`` device (shapes only, no memory; the RNG state is restored
    after it) to count its parameters: at most :data:`MAX_PARAMETERS` (``10**8``).

    Raises
    ------
    InputError
        If ``name`` is not a bundled model (the message lists the valid names); a keyword
        argument that the model does not take, of the wrong type or out of its range (the
        message names it); or a model over :data:`MAX_PARAMETERS` parameters.
    """
    try:
        factory = MODELS[name]
    except KeyError:
        raise InputError(
            f"unknown model {name!r}; bundled models: {', '.join(sorted(MODELS))}"
        ) from None
    kwargs = _check_kwargs(name, factory, kwargs)
    with torch.random.fork_rng(devices=[]), torch.device("meta"):  # the RNG state is kept
        count = sum(p.numel() for p in factory(**kwargs).parameters())
    if count > MAX_PARAMETERS:
        sizes = ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "its defaults"
        raise InputError(
            f"{name} with {sizes} has {count:,} parameters, over the "
            f"{MAX_PARAMETERS:,} allowed: use smaller sizes"
        )
    return factory(**kwargs)
