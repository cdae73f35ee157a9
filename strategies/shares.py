"""Share planning (seed 000): profiles -> match ratios -> initial shares, caps, rebalancing.

:class:`SharePlanner` asks every node for its resource profile (``query.profile``), turns the
evaluations into match ratios on the distorted radar chart (:func:`flower_edge.radar.match_ratios`),
splits the per-round total of samples by them (seed formula 7, capped by
``max_share_fraction``), and after each aggregation refits each node's time model
``T = k f + b`` from its recent jobs and moves samples from slow to fast nodes (seed step 9,
or the equal-finish optimum). Nodes without a usable profile get equal shares.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from logging import INFO, WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from flower_edge import wire
from flower_edge.allocation import TimeModel, fit_time_model, initial_shares, rebalance
from flower_edge.errors import ConfigError, InputError
from flower_edge.radar import match_ratios
from strategies.clock import Clock
from strategies.config import ShareConfig
from strategies.membership import Node
from strategies.records import ProfileRecord, parse_profile_reply

__all__ = ["MAX_OBSERVATIONS", "SharePlanner"]

#: (share, seconds) observations kept per node for the time model T = k f + b: the most recent
#: ones (the fit follows a device whose speed changes, and the state stays bounded)
MAX_OBSERVATIONS = 32


class SharePlanner:
    """Plan the sample shares of the nodes (seed 000).

    Parameters
    ----------
    grid : Grid
        Flower's grid (for the profile query).
    clock : Clock
        The run's clock (real time for the profile deadline).
    config : ShareConfig
        The share options.
    poll_interval : float
        Real seconds between two polls while waiting for profiles.
    name : str
        Strategy name for the logs.
    """

    def __init__(
        self, grid: Grid, clock: Clock, config: ShareConfig, poll_interval: float, name: str
    ) -> None:
        self.grid = grid
        self.clock = clock
        self.config = config
        self.poll_interval = poll_interval
        self.name = name
        self.resolved_share: float | None = None  # p_c once "auto" is resolved

    def check_node_count(self, count: int) -> None:
        """Raise ConfigError if the share cap cannot let ``count`` nodes cover the total."""
        if self.config.max_share_fraction * count < 1:
            raise ConfigError(
                f"max_share_fraction = {self.config.max_share_fraction} must be >= 1 / number "
                f"of nodes ({count}) so that the shares can add up to the total"
            )

    def compute_share(self) -> float:
        """Return ``p_c`` of the radar chart; ``"auto"`` runs the operator analysis once."""
        cfg = self.config
        if cfg.compute_share != "auto":
            return float(cfg.compute_share)
        if self.resolved_share is None:
            if cfg.model is None or cfg.input_shape is None:
                self.resolved_share = 0.5
                log(
                    INFO,
                    "%s: compute_share 'auto' without a model: p_c = 0.5 (pass "
                    "ShareConfig(model=..., input_shape=...) to analyse the served model)",
                    self.name,
                )
            else:
                from flower_edge.operators import compute_share_of  # imports torch

                self.resolved_share = compute_share_of(cfg.model, cfg.input_shape)
                log(INFO, "%s: p_c = %.3f from the served model", self.name, self.resolved_share)
        return self.resolved_share

    def plan(self, ids: list[int], nodes: dict[int, Node]) -> None:
        """Profile the nodes ``ids`` (if enabled) and set their initial shares."""
        profiles: dict[int, ProfileRecord] = {}
        if self.config.profile:
            profiles = self.query_profiles(ids)
        self.assign_initial(ids, profiles, nodes)

    def query_profiles(self, ids: list[int]) -> dict[int, ProfileRecord]:
        """Send the profile query to ``ids``; return the valid replies within the timeout."""
        cfg = ConfigRecord({wire.PROFILE_MODE: self.config.profile_mode})
        msgs = [
            Message(
                RecordDict({wire.CONFIG: cfg}),
                n,
                wire.PROFILE_MESSAGE_TYPE,
                ttl=self.config.profile_timeout or None,
            )
            for n in ids
        ]
        pushed = set(self.grid.push_messages(msgs))
        pending = {
            m.metadata.message_id: m.metadata.dst_node_id
            for m in msgs
            if m.metadata.message_id in pushed
        }
        out: dict[int, ProfileRecord] = {}
        deadline = self.clock.real_now() + self.config.profile_timeout
        while pending:
            for reply in self.grid.pull_messages(list(pending)):
                node = pending.pop(reply.metadata.reply_to_message_id, None)
                if node is None:
                    continue
                try:
                    record = parse_profile_reply(reply)
                    if record.node_id != node:
                        raise InputError(f"profile reply claims node {record.node_id}")
                    out[node] = record
                except InputError as exc:
                    log(
                        WARNING,
                        "%s: node %s gets an equal share: bad profile reply: %s",
                        self.name,
                        node,
                        exc,
                    )
            if not pending or self.clock.real_now() >= deadline:
                break
            self.clock.sleep(min(self.poll_interval, deadline - self.clock.real_now()))
        for node in sorted(pending.values()):
            log(WARNING, "%s: node %s gets an equal share: no profile reply", self.name, node)
        return out

    def assign_initial(
        self, ids: list[int], profiles: dict[int, ProfileRecord], nodes: dict[int, Node]
    ) -> None:
        """Set the initial share, match ratio and ``profiled`` flag of each node in ``ids``."""
        cfg = self.config
        n = len(ids)
        reported = [p.local_samples for p in profiles.values() if p.local_samples > 0]
        total = cfg.total_samples
        if total is None:
            total = round(sum(reported) / len(reported) * n) if reported else 0
        cap = max(1, math.ceil(cfg.max_share_fraction * total)) if total else None
        profiled = [i for i in ids if i in profiles]
        ratios_by_node: dict[int, float] = {}
        if profiled:
            evaluations = np.array([profiles[i].evaluations for i in profiled], dtype=np.float64)
            try:
                ratios = match_ratios(
                    evaluations,
                    self.compute_share(),
                    order_invariant=cfg.order_invariant,
                    drop_empty_axes=cfg.drop_empty_axes,
                )
                ratios_by_node = {i: float(r) for i, r in zip(profiled, ratios, strict=True)}
            except InputError as exc:
                log(WARNING, "%s: match ratios unavailable (%s): equal shares", self.name, exc)
        equal = [i for i in ids if i not in ratios_by_node or not ratios_by_node[i] > 0]
        matched = [i for i in ids if i not in equal]
        # unprofiled nodes get total / n each; the rest is split by match ratio
        equal_part = total * len(equal) // n if matched else total
        shares: dict[int, int] = {}
        if equal:
            split = initial_shares(equal_part, [1.0] * len(equal), [cap] * len(equal))
            shares.update(zip(equal, split, strict=True))
        if matched:
            matched_ratios = [ratios_by_node[i] for i in matched]
            split = initial_shares(total - equal_part, matched_ratios, [cap] * len(matched))
            shares.update(zip(matched, split, strict=True))
            self.log_capped(matched, matched_ratios, total - equal_part, cap)
        for i in ids:
            node = nodes[i]
            node.share = shares[i]
            node.ratio = ratios_by_node.get(i, 0.0)
            node.profiled = i in ratios_by_node
        log(
            INFO,
            "%s: total %d samples per round; shares %s",
            self.name,
            total,
            {i: shares[i] for i in ids},
        )

    def log_capped(self, ids: list[int], ratios: list[float], total: int, cap: int | None) -> None:
        """Warn about each node whose profile claims more than the cap."""
        if cap is None or not total:
            return
        whole = math.fsum(ratios)
        for node_id, ratio in zip(ids, ratios, strict=True):
            claimed = total * ratio / whole
            if claimed > cap:
                log(
                    WARNING,
                    "%s: node %s share capped at %d samples (max_share_fraction %s); "
                    "its profile claims %.0f",
                    self.name,
                    node_id,
                    cap,
                    self.config.max_share_fraction,
                    claimed,
                )

    @staticmethod
    def observe(node: Node, share: int, seconds: float) -> None:
        """Record a whole job of ``share`` samples that took ``seconds`` (bounded history)."""
        node.observations.append((float(share), seconds))
        del node.observations[:-MAX_OBSERVATIONS]

    def rebalance(self, nodes: Iterable[Node]) -> None:
        """Refit every node's time model and move samples from slow to fast nodes."""
        method = self.config.rebalance
        if method == "off":
            return
        every = list(nodes)
        chosen: list[Node] = []
        models: list[TimeModel] = []
        for node in every:
            obs = [(f, t) for f, t in node.observations if f > 0 and t > 0]
            if node.gone or node.share <= 0 or not obs:
                continue
            prior = TimeModel(k=sum(t for _, t in obs) / sum(f for f, _ in obs), b=0.0)
            try:
                models.append(fit_time_model(obs[-20:], prior))
            except InputError:
                continue
            chosen.append(node)
        if len(chosen) < 2:
            return
        total = sum(n.share for n in every if not n.gone)
        cap = max(1, math.ceil(self.config.max_share_fraction * total))
        shares = [n.share for n in chosen]
        allocation = rebalance(
            shares, models, method=method, capacities=[max(cap, s) for s in shares]
        )
        for node, share in zip(chosen, allocation.samples, strict=True):
            node.share = int(share)
        log(
            INFO,
            "%s: rebalanced (%s): shares %s, predicted makespan %.3f s",
            self.name,
            method,
            {n.node_id: n.share for n in chosen},
            allocation.makespan,
        )
