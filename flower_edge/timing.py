"""How long local work takes on a device: the interface between clients and simulated devices.

On a real device the client measures wall-clock seconds and needs none of this. In a
simulation every virtual client shares one host, so host timings say nothing about the edge
device it stands for: the client asks a :class:`DeviceTimer` (implemented by
``simulations.devices``) how many samples fit in a slice budget and how long a slice lasts in
*virtual* seconds, transfers and offline stretches included. The server orders events by those
virtual durations (``flower_edge.wire.VIRTUAL_SECONDS``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["DeviceTimer"]


@runtime_checkable
class DeviceTimer(Protocol):
    """Virtual-time model of one device.

    All times are virtual seconds on the simulation's clock. Implementations are pure and
    deterministic given their seed, so the same run gives the same history bit for bit.
    """

    def samples_within(self, start: float, budget: float) -> int:
        """Return how many training samples the device processes in ``budget`` seconds.

        Parameters
        ----------
        start : float
            Virtual time at which the slice starts (availability may depend on it).
        budget : float
            Virtual seconds of the slice; ``budget > 0``.
        """
        ...

    def slice_seconds(
        self, start: float, samples: int, download_bytes: int, upload_bytes: int
    ) -> float:
        """Return the virtual duration of one slice that starts at ``start``.

        Parameters
        ----------
        start : float
            Virtual time at which the message reaches the node's queue.
        samples : int
            Training samples processed in the slice (>= 0).
        download_bytes : int
            Bytes received with the message (the global model, when it was sent).
        upload_bytes : int
            Bytes sent back (the update, when the job finished in this slice).

        Returns
        -------
        float
            Seconds from ``start`` until the reply reaches the server: download, compute,
            upload, any offline stretch the device goes through, and noise.
        """
        ...
