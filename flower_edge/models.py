"""Bundled models, by name, for the CLI, the examples and the simulations.

Every factory takes keyword arguments only and returns a fresh ``torch.nn.Module`` whose
parameters are initialised from torch's global RNG (seed it for reproducible weights).

=============  ===========================================  ============================
name           what                                         input
=============  ===========================================  ============================
``mlp``        2 hidden layers, ReLU                        ``(N, in_features)``
``cnn``        2 conv + BatchNorm + max-pool, then linear   ``(N, C, H, W)``
``cnn1d``      1-D conv net for MNIST-1D                    ``(N, in_features)``
=============  ===========================================  ============================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from flower_edge.errors import InputError

__all__ = ["MODELS", "CNN", "CNN1D", "MLP", "build_model"]


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
        if image_size < 4:
            raise InputError(f"image_size must be >= 4, got {image_size}")
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


#: name -> factory; other modules may register more (e.g. ``transformer``, ``resnet18``)
MODELS: dict[str, Callable[..., nn.Module]] = {"mlp": MLP, "cnn": CNN, "cnn1d": CNN1D}


def build_model(name: str, **kwargs: Any) -> nn.Module:
    """Build a bundled model by name.

    Raises
    ------
    InputError
        If ``name`` is not a bundled model; the message lists the valid names.
    """
    try:
        factory = MODELS[name]
    except KeyError:
        raise InputError(
            f"unknown model {name!r}; bundled models: {', '.join(sorted(MODELS))}"
        ) from None
    return factory(**kwargs)
