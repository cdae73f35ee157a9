"""Simulations: heterogeneous edge devices on one machine, through Flower's simulation engine.

Modules (import them directly; this package imports nothing heavy):

- :mod:`simulations.devices` — seeded virtual device population, ``VirtualDevice``
  (a :class:`flower_edge.timing.DeviceTimer`);
- :mod:`simulations.probe` — ``VirtualProbe``, the device's answer to the resource benchmark;
- :mod:`simulations.costs` — per-sample training cost of a model from its operator profile;
- :mod:`simulations.scenarios` — ``digits-20``, ``mnist1d-100`` and their overrides;
- :mod:`simulations.app` — ``server_app`` / ``client_app`` for ``flwr run .`` (re-exports the
  four modules below);
- :mod:`simulations.settings` — ``SimSettings`` and the run-config keys;
- :mod:`simulations.nodes` — each virtual node's device, data partition and task;
- :mod:`simulations.client`, :mod:`simulations.server` — the simulation ClientApp and ServerApp;
- :mod:`simulations.fedavg` — Flower's FedAvg on the virtual clock;
- :mod:`simulations.recorder` — the recording Grid (timelines, wasted work, stable node ids);
- :mod:`simulations.runner` — ``run_experiment`` (Ray or in-process);
- :mod:`simulations.report`, :mod:`simulations.plots` — results, JSON contract, plots (the
  radar chart of ``flower-edge plan --plot`` included);
- :mod:`simulations.cli`, :mod:`simulations.cli_options`, :mod:`simulations.outputs` —
  ``flower-edge simulate``, its options and the files it writes to ``--out``.

See ``docs/simulations.md``.
"""

__all__: list[str] = []
