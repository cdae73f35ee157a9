"""Share planning (seed 000): profiles -> match ratios -> initial shares, caps, rebalancing.

:class:`SharePlanner` asks every node for its resource profile (with its first train message),
turns the evaluations into match ratios on the distorted radar chart
(:func:`flower_edge.radar.match_ratios`), splits the per-round total of samples by them (seed
formula 7, capped by ``max_share_fraction``), and after each aggregation refits each node's
time model ``T = k f + b`` from its recent jobs and moves samples from slow to fast nodes (seed
step 9, or the equal-finish optimum). Nodes without a usable profile get equal shares.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from logging import INFO, WARNING
from typing import Final

import numpy as np
from flwr.common.logger import log
from flwr.serverapp import Grid

from flower_edge.allocation import TimeModel, fit_time_model, initial_shares, rebalance
from flower_edge.errors import ConfigError, InputError
from flower_edge.radar import match_ratios
from strategies.clock import Clock
from strategies.config import ShareConfig
from strategies.membership import Node
from strategies.records import BAD_PROFILE_REPLY, ProfileRecord, TrainReply
from strategies.share_logs import SUSPECT_OVER_CAP, SUSPECT_RATIO_GAP, log_capped, log_zero_ratios

__all__ = [
    "MAX_OBSERVATIONS",
    "REJECTED",
    "SUSPECT_OVER_CAP",
    "SUSPECT_RATIO_GAP",
    "SharePlanner",
    "log_capped",
    "late_answer",
    "log_zero_ratios",
    "profile_beside",
    "split_within",
]

#: the reason a profile is missing when the reply carrying it could not be read at all
REJECTED: Final = "reply rejected"

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
        # the profile round (see begin): nothing to plan until it starts
        self.ids: list[int] = []
        self.profiles: dict[int, ProfileRecord] = {}
        self.pending: set[int] = set()
        self.held: set[int] = set()  # answered with their profile only: wait for the plan
        self.late: set[int] = set()  # no profile by the deadline: taken if it comes later
        self.cap: int | None = None  # the plan's cap on any share (max_share_fraction)
        self.synchronous = False  # every node's update is needed (size_for)
        self.deadline = math.inf
        self.planned = True

    def size_for(self, count: int, per_aggregation: int) -> None:
        """Size the plan for ``count`` nodes and ``per_aggregation`` updates per aggregation.

        ``per_aggregation >= count``: every round waits for the slowest node, which is then
        given no more than its match-ratio share (:func:`split_within`).

        Raises
        ------
        ConfigError
            The share cap cannot let ``count`` nodes cover the total.
        """
        self.synchronous = per_aggregation >= count
        if self.config.max_share_fraction * count < 1:
            raise ConfigError(
                f"max_share_fraction = {self.config.max_share_fraction} must be >= 1 / number "
                f"of nodes ({count}) so that the shares can add up to the total"
            )

    def check_model(self) -> None:
        """Run the served model's operator analysis now, before any message (``"auto"``).

        Raises
        ------
        ConfigError
            The model does not run on ``input_shape`` (the shares would silently fall back
            to equal ones otherwise).
        """
        cfg = self.config
        if cfg.compute_share != "auto" or cfg.model is None:
            return
        try:
            self.compute_share()
        except InputError as exc:
            raise ConfigError(
                f"ShareConfig model and input_shape {cfg.input_shape}: the operator analysis "
                f"of the served model on a batch of {cfg.input_dtype} zeros failed: {exc} "
                f"(input_dtype='float64' or 'int64' for a model of other inputs, e.g. 'int64' "
                f"for token ids; or give compute_share, p_c in [0, 1], instead of 'auto')"
            ) from exc

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

                self.resolved_share = compute_share_of(
                    cfg.model, cfg.input_shape, input_dtype=cfg.input_dtype
                )
                log(INFO, "%s: p_c = %.3f from the served model", self.name, self.resolved_share)
        return self.resolved_share

    def begin(self, ids: list[int], nodes: dict[int, Node]) -> None:
        """Start planning the shares of ``ids``: ask their profiles, or split equally now.

        With ``profile`` on, each node's first train message asks for its profile
        (:data:`wire.PROFILE_MODE` in its config, :attr:`Node.profile_pending`): a flower-edge
        client answers with its profile only, a plain Flower ClientApp trains and its update
        counts as usual; with ``profile_with_job`` a flower-edge client trains that job as
        well and sends its profile beside the update. The shares are planned once every node
        has answered (or after ``profile_timeout`` real seconds; :meth:`check_deadline`);
        until then a node that answered with its profile only waits, one that trained goes
        on with its own default share.
        """
        self.ids = list(ids)
        self.profiles = {}
        self.held = set()
        self.late = set()
        self.pending = set(ids) if self.config.profile else set()
        self.deadline = self.clock.real_now() + self.config.profile_timeout
        for node_id in self.pending:
            nodes[node_id].profile_pending = True
        self.planned = False
        if not self.pending:
            self.finish(nodes)

    def holds(self, node: Node) -> bool:
        """Return whether ``node`` waits for the plan (it answered with its profile only)."""
        return not self.planned and node.node_id in self.held

    def answered(
        self,
        node: Node,
        nodes: dict[int, Node],
        profile: ProfileRecord | None,
        reason: str,
        *,
        with_job: bool = False,
    ) -> bool:
        """Take ``node``'s answer to its profile request (``None``: no profile, ``reason``).

        ``with_job``: the profile came beside a trained update, so the node does not wait
        for the plan. Return whether this answer completed the plan. A profile that comes
        after the deadline of the plan goes to :func:`late_answer`.
        """
        if not node.profile_pending:
            if profile is not None:
                late_answer(self, node, nodes, profile)
            return False
        node.profile_pending = False
        self.pending.discard(node.node_id)
        if profile is not None:
            self.profiles[node.node_id] = profile
            if not with_job:
                self.held.add(node.node_id)
        elif reason in ("plain", REJECTED):
            log(
                INFO,
                "%s: node %s runs with equal shares: %s",
                self.name,
                node.node_id,
                "no flower-edge profile"
                if reason == "plain"
                else "its first reply was rejected (logged), so no profile came with it",
            )
        else:
            log(
                WARNING,
                "%s: node %s gets an equal share: its answer carried no usable profile (%s)",
                self.name,
                node.node_id,
                reason,
            )
        if not self.pending and not self.planned:
            self.finish(nodes)
            return True
        return False

    def check_deadline(self, nodes: dict[int, Node]) -> bool:
        """Plan without the nodes that did not answer in ``profile_timeout``; return if it did."""
        if self.planned or self.clock.real_now() < self.deadline:
            return False
        for node_id in sorted(self.pending):
            log(
                INFO,
                "%s: node %s sent no profile within %s s: it runs with an equal share",
                self.name,
                node_id,
                self.config.profile_timeout,
            )
            nodes[node_id].profile_pending = False
        self.late = set(self.pending)
        self.pending.clear()
        self.finish(nodes)
        return True

    def ratios_of(self, profiles: list[ProfileRecord]) -> np.ndarray:
        """Return the match ratios of ``profiles`` on the distorted radar chart (seed 000)."""
        evaluations = np.array([p.evaluations for p in profiles], dtype=np.float64)
        return match_ratios(
            evaluations,
            self.compute_share(),
            order_invariant=self.config.order_invariant,
            drop_empty_axes=self.config.drop_empty_axes,
        )

    def finish(self, nodes: dict[int, Node]) -> None:
        """Assign the initial shares from the profiles received."""
        self.planned = True
        self.assign_initial(self.ids, self.profiles, nodes)

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
        self.cap = cap
        profiled = [i for i in ids if i in profiles]
        ratios_by_node: dict[int, float] = {}
        if profiled:
            try:
                ratios = self.ratios_of([profiles[i] for i in profiled])
                ratios_by_node = {i: float(r) for i, r in zip(profiled, ratios, strict=True)}
            except InputError as exc:
                log(WARNING, "%s: match ratios unavailable (%s): equal shares", self.name, exc)
        matched = [i for i in ids if ratios_by_node.get(i, 0.0) > 0]
        zero = [i for i in ids if i in ratios_by_node and i not in matched]
        # the seed's f_d = F m_d / sum m gives a node of match ratio 0 nothing; "equal" gives
        # it F / n like an unprofiled node (ShareConfig.zero_ratio)
        out = zero if cfg.zero_ratio == "none" and matched else []
        equal = [i for i in ids if i not in matched and i not in out]
        # unprofiled nodes get total / n each; the rest is split by match ratio
        equal_part = total * len(equal) // n if matched else total
        shares: dict[int, int] = dict.fromkeys(out, 0)
        if equal:
            split = self._split(equal_part, equal, [1.0] * len(equal), cap, profiles)
            shares.update(zip(equal, split, strict=True))
        if matched:
            matched_ratios = [ratios_by_node[i] for i in matched]
            split = self._split(total - equal_part, matched, matched_ratios, cap, profiles)
            shares.update(zip(matched, split, strict=True))
            fraction = cfg.max_share_fraction
            log_capped(self.name, matched, matched_ratios, total - equal_part, cap, fraction, split)
            if equal and split:
                # a node without a profile is not given more than any profiled node: with
                # max_epochs binding, total / n would be more work than the caps allow the
                # others (measured: a node too slow to answer its profile in time got 720
                # samples while the profiled nodes were capped at 432)
                most = max(split)
                shares.update({i: min(shares[i], most) for i in equal})
        log_zero_ratios(self.name, zero, shares, profiles, every_zero=not matched)
        for i in ids:
            node = nodes[i]
            node.share = shares[i]
            node.ratio = ratios_by_node.get(i, 0.0)
            node.profiled = i in ratios_by_node
            node.planned_out = bool(total) and node.share == 0
            if total:
                self.floored(node)
                shares[i] = node.share
        if total:
            log(
                INFO,
                "%s: total %d samples per round; shares %s",
                self.name,
                total,
                {i: shares[i] for i in ids},
            )
        else:
            log(
                INFO,
                "%s: no node reported its local sample count (no profile): every node trains "
                "its own default amount (e.g. the app's local epochs)",
                self.name,
            )

    def node_cap(self, node_id: int, cap: int | None) -> int | None:
        """Return the cap on ``node_id``'s share: ``cap``, and ``max_epochs`` of its own data.

        ``ShareConfig.max_epochs`` caps a node's share at that many epochs of the local
        samples its profile reported (none when it reported none).
        """
        epochs, local = self.config.max_epochs, self.own_samples(node_id)
        if epochs is None or local <= 0:
            return cap
        own = max(1, math.floor(epochs * local))
        return own if cap is None else min(cap, own)

    def own_samples(self, node_id: int) -> int:
        """Return the local samples ``node_id``'s profile reported (0: none, or no profile)."""
        profile = self.profiles.get(node_id)
        return 0 if profile is None else max(0, profile.local_samples)

    def node_floor(self, node_id: int) -> int:
        """Return the floor on ``node_id``'s share: ``min_epochs`` of its own data, or 0.

        0 when ``ShareConfig.min_epochs`` is None or the node reported no local samples.
        """
        epochs, local = self.config.min_epochs, self.own_samples(node_id)
        if epochs is None or local <= 0:
            return 0
        return max(1, math.ceil(epochs * local))

    def floored(self, node: Node, *, announce: bool = True) -> None:
        """Raise ``node``'s share to its floor (``min_epochs``); log it when ``announce``."""
        floor = self.node_floor(node.node_id)
        if node.share >= floor:
            return
        if announce:  # rebalancing logs every share after each aggregation anyway
            log(
                INFO,
                "%s: node %s's share %d raised to %d (min_epochs %s of its %d samples)",
                self.name,
                node.node_id,
                node.share,
                floor,
                self.config.min_epochs,
                self.own_samples(node.node_id),
            )
        node.share = floor
        node.planned_out = False

    def _split(
        self,
        total: int,
        ids: list[int],
        ratios: list[float],
        cap: int | None,
        profiles: dict[int, ProfileRecord],
    ) -> tuple[int, ...]:
        """Split ``total`` by ``ratios`` within each node's cap (:func:`split_within`)."""
        self.profiles = {**self.profiles, **profiles}
        caps = [self.node_cap(i, cap) for i in ids]
        where = f"{self.name}: max_epochs {self.config.max_epochs}"
        return split_within(total, ratios, caps, synchronous=self.synchronous, where=where)

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
            # a node planned out by an earlier rebalancing (0 samples) stays a candidate: the
            # allocation hands it work again when it would finish earliest with it
            if node.gone or (node.share <= 0 and not node.planned_out) or not obs:
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
        caps = [self.node_cap(n.node_id, cap) or cap for n in chosen]
        allocation = rebalance(
            shares,
            models,
            method=method,
            capacities=[max(c, s) for c, s in zip(caps, shares, strict=True)],
        )
        for node, share in zip(chosen, allocation.samples, strict=True):
            node.share = int(share)
            node.planned_out = node.share == 0  # 0 samples: it does not train (allocation)
            self.floored(node, announce=False)
        log(
            INFO,
            "%s: rebalanced (%s): shares %s, predicted makespan %.3f s",
            self.name,
            method,
            {n.node_id: n.share for n in chosen},
            allocation.makespan,
        )


def late_answer(
    planner: SharePlanner, node: Node, nodes: dict[int, Node], profile: ProfileRecord
) -> None:
    """Give a node whose profile came after ``planner``'s plan its share by match ratio.

    Its match ratio is computed with every profile received; its share is that ratio
    times the planned samples per unit of ratio of the profiled nodes (their shares over
    their ratios, all recomputed together), within its caps. The other shares stay as
    planned: rebalancing moves them from the observed job times.
    """
    if node.node_id not in planner.late:
        return
    planner.late.discard(node.node_id)
    planner.profiles[node.node_id] = profile
    matched = [i for i in planner.profiles if i in nodes and nodes[i].profiled]
    planned = sum(nodes[i].share for i in matched)
    if not planned:
        return  # no profiled share to scale by: the node keeps its equal share
    ids = [*matched, node.node_id]
    try:
        ratios = planner.ratios_of([planner.profiles[i] for i in ids])
    except InputError as exc:
        log(WARNING, "%s: late profile of node %s unusable: %s", planner.name, node.node_id, exc)
        return
    ratio = float(ratios[-1])
    weight = math.fsum(float(r) for r in ratios[:-1])
    if not weight > 0:
        return
    if not ratio > 0:
        if planner.config.zero_ratio == "none":
            node.share, node.ratio, node.profiled, node.planned_out = 0, 0.0, True, True
        shares = {node.node_id: node.share}
        log_zero_ratios(planner.name, [node.node_id], shares, planner.profiles, every_zero=False)
        return
    share = max(1, round(ratio * planned / weight))
    cap = planner.node_cap(node.node_id, planner.cap)
    node.share = share if cap is None else min(share, cap)
    node.ratio = ratio
    node.profiled = True
    planner.floored(node)
    log(
        INFO,
        "%s: node %s's profile came after the plan: share %d by its match ratio",
        planner.name,
        node.node_id,
        node.share,
    )


def split_within(
    total: int, ratios: list[float], caps: list[int | None], *, synchronous: bool, where: str
) -> tuple[int, ...]:
    """Split ``total`` by ``ratios`` within ``caps``; every node at its cap if they are short.

    ``synchronous`` (every update is needed for an aggregation, so each round waits for the
    slowest node): no node gets more than its match-ratio share either, and the round trains
    fewer samples when the caps take some off (logged, ``where`` naming the caps).
    """
    whole = math.fsum(ratios)
    bounded = synchronous and whole > 0
    if bounded:  # no node beyond its match-ratio share
        fair = [max(1, math.ceil(total * r / whole)) for r in ratios]
        caps = [f if c is None else min(c, f) for c, f in zip(caps, fair, strict=True)]
    held = sum(math.inf if c is None else c for c in caps)
    if held < total:  # the caps cannot hold the total: every node at its cap
        if bounded:
            log(
                INFO,
                "%s: every update is needed for an aggregation (as many nodes as updates per "
                "aggregation), so no node gets more than its match-ratio share and the caps "
                "leave %d of %d samples per round",
                where,
                held,
                total,
            )
        else:
            log(
                WARNING,
                "%s caps the shares at %d of %d samples per round: every node is held at its "
                "cap, so the match ratios and rebalancing have no effect (raise the cap above "
                "the samples per round to keep them)",
                where,
                held,
                total,
            )
        return tuple(int(c) for c in caps if c is not None)
    return initial_shares(total, ratios, caps)


def profile_beside(
    reply: TrainReply | ProfileRecord | None, reason: str | None
) -> tuple[ProfileRecord | None, str]:
    """Return the profile a train reply carries beside its update, or why it has none.

    The reason is ``"plain"`` for an unmodified Flower ClientApp's reply, the rejection of
    a bad profile, :data:`REJECTED` for a reply that could not be read at all (its rejection
    is logged on its own), or ``"no profile"``.
    """
    if not isinstance(reply, TrainReply):
        if reason and not reason.startswith(BAD_PROFILE_REPLY):
            return None, REJECTED  # an unreadable reply: its rejection is logged on its own
        return None, reason or "no profile"
    if reply.profile is not None:
        return reply.profile, ""
    if reply.drop_in:
        return None, "plain"
    return None, reply.profile_problem or reason or "no profile"
