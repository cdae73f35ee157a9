"""digitsexample: model, data and the train / test loops (plain PyTorch, no Flower)."""

from __future__ import annotations

from functools import cache

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

#: share of the 1797 digits kept by the server as its centralised test set
CENTRAL_TEST_FRACTION = 0.2


class Net(nn.Module):
    """A small MLP for 8x8 digit images (64 inputs, 10 classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the class logits of a batch of flattened images."""
        out: torch.Tensor = self.layers(x)
        return out


@cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """Return all digits, scaled to [0, 1], in one fixed shuffled order."""
    images, labels = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(labels))
    return (images[order] / 16.0).astype(np.float32), labels[order].astype(np.int64)


def _loader(x: np.ndarray, y: np.ndarray, batch_size: int, shuffle: bool) -> DataLoader:
    data = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle)


def load_data(
    partition_id: int, num_partitions: int, batch_size: int
) -> tuple[DataLoader, DataLoader]:
    """Return this partition's train and validation loaders (an 80 / 20 split)."""
    x, y = _digits()
    pool = len(y) - int(len(y) * CENTRAL_TEST_FRACTION)
    part = np.array_split(np.arange(pool), num_partitions)[partition_id]
    cut = int(len(part) * 0.8)
    train, val = part[:cut], part[cut:]
    return (
        _loader(x[train], y[train], batch_size, shuffle=True),
        _loader(x[val], y[val], batch_size, shuffle=False),
    )


def load_centralized_dataset() -> DataLoader:
    """Return the server's test set (the digits no partition holds)."""
    x, y = _digits()
    pool = len(y) - int(len(y) * CENTRAL_TEST_FRACTION)
    return _loader(x[pool:], y[pool:], batch_size=128, shuffle=False)


def train(net: Net, trainloader: DataLoader, epochs: int, lr: float, device: torch.device) -> float:
    """Train ``net`` with SGD; return the mean training loss of the last epoch."""
    net.to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    total, batches = 0.0, 0
    for _ in range(epochs):
        total, batches = 0.0, 0
        for images, labels in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(images.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
    return total / max(batches, 1)


def test(net: Net, testloader: DataLoader, device: torch.device) -> tuple[float, float]:
    """Return the mean loss and the accuracy of ``net`` on ``testloader``."""
    net.to(device)
    net.eval()
    criterion = nn.CrossEntropyLoss()
    loss, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for images, labels in testloader:
            outputs = net(images.to(device))
            loss += criterion(outputs, labels.to(device)).item() * len(labels)
            correct += int((outputs.argmax(1) == labels.to(device)).sum().item())
            seen += len(labels)
    return loss / max(seen, 1), correct / max(seen, 1)
