"""Operator intensity (seed 000, claims 1-2) against hand counts and torch's flop counter."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest
import torch
from conftest import ANALYZE_FIELDS
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from flower_edge.errors import InputError
from flower_edge.models import build_model
from flower_edge.operators import ModelProfile, OperatorCost, analyze_model, op_cost

F32 = 4


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Keep these tests light on the shared cores; restore the setting afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def only(profile: ModelProfile, packet: str) -> list[OperatorCost]:
    return [o for o in profile.operators if o.op.split(".")[1] == packet]


def test_linear_by_hand() -> None:
    # forward only: t (a view, left out) and addmm (2*m*k*n + bias m*n)
    profile = analyze_model(nn.Linear(4, 3), torch.zeros(2, 4), backward=False)
    assert [o.op for o in profile.operators] == ["aten.addmm.default"]
    assert profile.metadata_only == 1  # aten.t
    op = profile.operators[0]
    assert op.flops == 2 * 2 * 4 * 3 + 2 * 3
    assert op.bytes == (3 + 8 + 12 + 6) * F32  # bias, input, weight^T, output
    assert op.intensity == pytest.approx(54 / 116)
    assert op.name == "fwd/Linear/addmm"


def test_conv_by_hand_forward_and_backward() -> None:
    conv = nn.Conv2d(2, 3, kernel_size=3)  # (1, 2, 5, 5) -> (1, 3, 3, 3)
    x = torch.zeros(1, 2, 5, 5)
    fwd = only(analyze_model(conv, x, backward=False), "convolution")
    macs = 1 * (3 * 3) * (3 * 2 * 3 * 3)
    assert fwd[0].flops == 2 * macs + 27
    assert fwd[0].bytes == (50 + 54 + 3 + 27) * F32
    # the input needs no gradient: backward computes grad-weight and grad-bias only
    bwd = only(analyze_model(conv, x), "convolution_backward")
    assert bwd[0].flops == 2 * macs + 27


def test_elementwise_pooling_norm_reduction_by_hand() -> None:
    model = nn.Sequential(nn.BatchNorm2d(2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
    profile = analyze_model(model, torch.zeros(4, 2, 6, 6), backward=False)
    n = 4 * 2 * 6 * 6
    assert only(profile, "relu")[0].flops == n
    assert only(profile, "relu")[0].bytes == 2 * n * F32
    assert only(profile, "native_batch_norm")[0].flops == 8 * n
    assert only(profile, "max_pool2d_with_indices")[0].flops == (n // 4) * 4
    # the loss of a 4-D output is the mean of squares: a reduction by input elements
    full = analyze_model(model[:3], torch.zeros(4, 2, 6, 6))
    assert only(full, "mean")[0].flops == n // 4


def test_attention_by_hand() -> None:
    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Parameter(torch.randn(2, 3, 5, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.scaled_dot_product_attention(self.q, x, x)

    x = torch.randn(2, 3, 7, 8)
    profile = analyze_model(Attn(), x, execute=True)
    scores = 2 * 3 * 5 * 7
    fwd = only(profile, "_scaled_dot_product_flash_attention_for_cpu")
    bwd = only(profile, "_scaled_dot_product_flash_attention_for_cpu_backward")
    assert fwd[0].flops == 2 * scores * (8 + 8) + 5 * scores
    assert bwd[0].flops == 2 * scores * (3 * 8 + 2 * 8) + 3 * scores


def test_products_agree_with_torch_flop_counter() -> None:
    model = build_model("resnet18", width=8)
    x = torch.zeros(2, 3, 16, 16)
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(x)
        torch.autograd.backward(nn.functional.cross_entropy(out, torch.zeros(2, dtype=torch.long)))
    reference = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    profile = analyze_model(model, x, execute=True)
    for packet in ("convolution", "convolution_backward", "mm"):
        mine = math.fsum(o.flops for o in only(profile, packet))
        assert mine == reference[f"aten.{packet}"], packet
    # addmm: torch counts 2*m*k*n, we add the bias (m*n)
    addmm = only(profile, "addmm")[0]
    assert addmm.flops == reference["aten.addmm"] + 2 * 10


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("mlp", (8, 64)),
        ("cnn", (8, 1, 8, 8)),
        ("cnn1d", (8, 40)),
        ("transformer", (4, 64)),
        ("resnet18", (2, 3, 16, 16)),
    ],
)
def test_bundled_models_fully_modelled(name: str, shape: tuple[int, ...]) -> None:
    kwargs = {"width": 8} if name == "resnet18" else {}
    profile = analyze_model(build_model(name, **kwargs), torch.zeros(shape))
    assert profile.unmodelled == ()
    assert profile.operators
    assert any(o.name.startswith("bwd/") for o in profile.operators)
    # no view or allocation-only op is listed
    assert not {o.op.split(".")[1] for o in profile.operators} & {"view", "t", "detach", "empty"}
    # classification by the mean intensity, count-based shares
    mean = sum(o.intensity for o in profile.operators) / len(profile.operators)
    assert profile.mean_intensity == pytest.approx(mean)
    for o in profile.operators:
        assert o.kind == ("compute" if o.intensity > mean else "memory")
        assert o.intensity == (o.flops / o.bytes if o.bytes else 0.0)
    n_compute = sum(o.kind == "compute" for o in profile.operators)
    assert profile.compute_share == n_compute / len(profile.operators)
    assert profile.memory_share == pytest.approx(1 - profile.compute_share)
    assert 0 < profile.compute_share < 1


def test_flop_weighted_share_and_totals() -> None:
    model = build_model("cnn")
    x = torch.zeros(8, 1, 8, 8)
    count = analyze_model(model, x)
    flops = analyze_model(model, x, share="flops")
    assert [o.flops for o in count.operators] == [o.flops for o in flops.operators]
    total = math.fsum(o.flops for o in flops.operators)
    compute = math.fsum(o.flops for o in flops.operators if o.kind == "compute")
    assert flops.compute_share == pytest.approx(compute / total)
    assert flops.total_flops == pytest.approx(total)
    assert flops.compute_flops == pytest.approx(compute)
    assert flops.total_bytes == pytest.approx(math.fsum(o.bytes for o in flops.operators))
    memory_bytes = math.fsum(o.bytes for o in flops.operators if o.kind == "memory")
    assert flops.memory_bytes == pytest.approx(memory_bytes)
    # convolutions dominate the FLOPs: the FLOP-weighted share is far above the count share
    assert flops.compute_share > 0.5 > count.compute_share


def test_meta_run_matches_real_run_for_a_cnn() -> None:
    model = build_model("cnn")
    x = torch.randn(4, 1, 8, 8)
    meta = analyze_model(model, x)
    real = analyze_model(model, x, execute=True)
    assert meta == real


def test_model_left_untouched() -> None:
    model = build_model("cnn")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    analyze_model(model, torch.randn(4, 1, 8, 8), execute=True)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in model.parameters())


def test_backward_false_is_forward_only() -> None:
    profile = analyze_model(build_model("mlp"), torch.zeros(4, 64), backward=False)
    assert all(o.name.startswith("fwd/") for o in profile.operators)
    assert not profile.includes_backward
    assert analyze_model(build_model("mlp"), torch.zeros(4, 64)).includes_backward
    assert not any("(loss)" in o.name for o in profile.operators)


def test_unmodelled_op_is_listed_with_fallback_and_warning() -> None:
    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.lgamma(self.lin(x))

    with pytest.warns(RuntimeWarning, match=r"no cost formula for aten\.lgamma\.default"):
        profile = analyze_model(Odd(), torch.ones(2, 3))
    assert "aten.lgamma.default" in profile.unmodelled
    lgamma = only(profile, "lgamma")[0]
    assert lgamma.flops == 6  # fallback: 1 per output element


def test_data_dependent_model_falls_back_to_a_real_run() -> None:
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.lin(x) if float(x.sum()) > 0 else -self.lin(x)
            return out

    profile = analyze_model(Branchy(), torch.ones(2, 3))
    assert only(profile, "addmm")


def test_to_dict_matches_contract() -> None:
    profile = analyze_model(build_model("mlp"), torch.zeros(4, 64))
    data = json.loads(json.dumps(profile.to_dict()))
    assert set(data) == ANALYZE_FIELDS
    assert (data["share"], data["includes_backward"]) == ("count", True)
    assert set(data["operators"][0]) == {"name", "op", "flops", "bytes", "intensity", "kind"}
    assert {o["kind"] for o in data["operators"]} == {"compute", "memory"}


def test_bad_inputs() -> None:
    with pytest.raises(InputError, match=r"input shape \(4, 5\) does not fit the model \(MLP\)"):
        analyze_model(build_model("mlp"), torch.zeros(4, 5))
    with pytest.raises(InputError, match="share must be one of"):
        analyze_model(build_model("mlp"), torch.zeros(4, 64), share="bytes")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="model must be a torch.nn.Module"):
        analyze_model("mlp", torch.zeros(4, 64))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="example_input must be a torch.Tensor"):
        analyze_model(build_model("mlp"), [1, 2])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="executed no operator"):
        analyze_model(nn.Identity(), torch.zeros(2, 2))


def test_forward_that_rejects_the_input_and_uncopyable_model() -> None:
    class Picky(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            assert x.shape[0] == 7, "batch must be 7"
            out: torch.Tensor = self.lin(x)
            return out

    with pytest.raises(InputError, match=r"does not fit the model \(Picky\): batch must be 7"):
        analyze_model(Picky(), torch.ones(2, 3))

    model = nn.Linear(3, 2)
    model.stream = (i for i in range(3))  # type: ignore[assignment]
    with pytest.raises(InputError, match="model: cannot copy Linear to analyse it"):
        analyze_model(model, torch.ones(2, 3))


def test_transposed_conv_by_hand() -> None:
    # each of the 2 x 16 input elements meets 3 x 3 x 3 weights: 864 multiply-adds
    conv = nn.ConvTranspose2d(2, 3, kernel_size=3)
    op = only(analyze_model(conv, torch.zeros(1, 2, 4, 4), backward=False), "convolution")[0]
    assert op.flops == 2 * 864 + 3 * 6 * 6


def test_operator_zoo_is_fully_modelled() -> None:
    class Zoo(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 8)
            self.conv = nn.Conv1d(8, 8, 3, padding=1)
            self.gn = nn.GroupNorm(2, 8)
            self.ln = nn.LayerNorm(8)
            self.drop = nn.Dropout(0.1)
            self.head = nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.emb(x).transpose(1, 2)  # (N, 8, L)
            h = nn.functional.gelu(self.gn(self.conv(h)))
            h = nn.functional.avg_pool1d(torch.sigmoid(h) * torch.tanh(h), 2)
            h = self.ln(h.transpose(1, 2)).softmax(dim=-1)
            pooled = torch.cat(
                [
                    h.mean(dim=1),
                    nn.functional.adaptive_max_pool1d(h.transpose(1, 2), 1).squeeze(-1),
                ],
                dim=1,
            )
            out: torch.Tensor = self.head(self.drop(pooled))
            return out

    x = torch.randint(0, 10, (4, 6))
    for execute in (False, True):
        profile = analyze_model(Zoo(), x, execute=execute)
        assert profile.unmodelled == (), execute
        gelu = only(profile, "gelu")[0]
        assert gelu.flops == 8 * 4 * 8 * 6


def test_compute_share_of_a_model_and_of_its_factory() -> None:
    """p_c of the served model: the digits MLP measures 0.40 (6 of 15 operators)."""
    from flower_edge.models import MLP
    from flower_edge.operators import compute_share_of

    reference = analyze_model(MLP(), torch.zeros(8, 64))
    by_hand = sum(o.kind == "compute" for o in reference.operators) / len(reference.operators)
    assert compute_share_of(MLP(), (8, 64)) == pytest.approx(by_hand)
    assert compute_share_of(MLP, [8, 64]) == pytest.approx(0.4)
    flops = compute_share_of(MLP, (8, 64), share="flops")
    assert flops == pytest.approx(reference.compute_flops / reference.total_flops)


@pytest.mark.parametrize(
    ("model", "shape", "match"),
    [
        (nn.Linear(4, 2), (4,), "input_shape must be batch-first"),
        (nn.Linear(4, 2), (2, 0), "every dim an int >= 1, got"),
        (lambda: "not a model", (2, 4), "model factory must return a torch.nn.Module, got str"),
        (nn.Linear(4, 2), (2, 5), "does not fit the model"),
    ],
)
def test_compute_share_of_rejects_bad_input(model: object, shape: tuple, match: str) -> None:
    from flower_edge.operators import compute_share_of

    with pytest.raises(InputError, match=match):
        compute_share_of(model, shape)  # type: ignore[arg-type]


def test_attention_value_dim_differs_from_query_dim() -> None:
    # S = B H S_q S_k = 2*3*5*7 scores; Q K^T costs 2 S D (D = 8), P V costs 2 S D_v (D_v = 4)
    q = torch.zeros(2, 3, 5, 8, device="meta")
    k = torch.zeros(2, 3, 7, 8, device="meta")
    v = torch.zeros(2, 3, 7, 4, device="meta")
    out = torch.zeros(2, 3, 5, 4, device="meta")
    scores = 2 * 3 * 5 * 7
    aten = torch.ops.aten
    fwd, _, modelled = op_cost(
        aten._scaled_dot_product_efficient_attention.default, (q, k, v, None, False), {}, (out,)
    )
    assert modelled
    assert fwd == 2 * scores * (8 + 4) + 5 * scores
    bwd_args = (out, q, k, v, None, out, None, None, None, 0.0, [True, True, True, False])
    bwd, _, _ = op_cost(
        aten._scaled_dot_product_efficient_attention_backward.default, bwd_args, {}, (q, k, v)
    )
    assert bwd == 2 * scores * (3 * 8 + 2 * 4) + 3 * scores


def test_pooling_with_an_int_kernel_counts_the_kernel_area() -> None:
    # nn.AvgPool2d(2) hands aten a one-element kernel: the window is 2 x 2, not 2
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(1, 2, 6, 6))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.avg_pool2d(x * self.w, 2)

    profile = analyze_model(Scaled(), torch.zeros(1, 2, 6, 6))
    outputs = 1 * 2 * 3 * 3
    assert only(profile, "avg_pool2d")[0].flops == outputs * 4
    assert only(profile, "avg_pool2d_backward")[0].flops == outputs * 4  # grad-output elements
    # aten also takes a one-element kernel list, widened to every spatial dim: [2] is 2 x 2 x 2
    x = torch.zeros(1, 2, 4, 4, 4, device="meta")
    y = torch.zeros(1, 2, 2, 2, 2, device="meta")
    flops, _, modelled = op_cost(torch.ops.aten.avg_pool3d.default, (x, [2]), {}, y)
    assert modelled
    assert flops == 16 * 8
