"""The ClientApp under Flower's simulation engine (Ray): real message passing, real node state."""

import time

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from clients.examples import client_app
from flower_edge import wire
from flower_edge.models import MLP

pytestmark = [pytest.mark.simulation, pytest.mark.slow]


def test_sliced_job_and_evaluate_through_the_simulation_engine() -> None:
    seen: list[dict] = []
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        deadline = time.monotonic() + 120
        while len(grid.get_node_ids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        node = sorted(grid.get_node_ids())[0]
        torch.manual_seed(0)
        arrays = ArrayRecord(MLP(in_features=64).state_dict())

        def ask(content: RecordDict, kind: str) -> Message:
            msg = Message(content, node, kind)
            (reply,) = grid.send_and_receive([msg], timeout=120)
            return reply

        cfg = {
            wire.JOB_ID: 1,
            wire.GLOBAL_VERSION: 0,
            wire.SAMPLE_SHARE: 96,
            wire.SLICE_BUDGET: 1e-9,  # one batch (32) per slice
        }
        content = RecordDict({wire.CONFIG: ConfigRecord(cfg), wire.ARRAYS: arrays})
        reply = ask(content, MessageType.TRAIN)
        seen.append(dict(reply.content[wire.METRICS]))
        while seen[-1][wire.DONE] == 0 and len(seen) < 10:
            reply = ask(RecordDict({wire.CONFIG: ConfigRecord(cfg)}), MessageType.TRAIN)
            seen.append(dict(reply.content[wire.METRICS]))
        trained = reply.content[wire.ARRAYS]
        reply = ask(RecordDict({wire.ARRAYS: trained}), MessageType.EVALUATE)
        seen.append(dict(reply.content[wire.METRICS]))

    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=2,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
    assert [m[wire.SAMPLES_PROCESSED] for m in seen[:3]] == [32, 64, 96]
    assert [m[wire.DONE] for m in seen[:3]] == [0, 0, 1]
    assert seen[3][wire.NUM_EXAMPLES] > 0
    assert 0.0 <= seen[3][wire.EVAL_ACCURACY] <= 1.0
