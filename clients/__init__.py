"""Client side on Flower.

The ClientApp builder around a user's task, the abandon decision at preemption points,
resumable local training on the assigned sample share, bundled data.
"""

__all__: list[str] = []
