"""The fast ArrayRecord <-> state dict conversion gives Flower's bytes and values."""

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord

from clients.arrays import decode_array, encode_array, record_to_state_dict, state_dict_to_record
from flower_edge.models import CNN

CASES = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.arange(6, dtype=">f4").reshape(2, 3),  # big-endian
    np.array(7, dtype=np.int64),  # 0-d (BatchNorm's num_batches_tracked)
    np.zeros((0, 5), dtype=np.float64),
    np.arange(10, dtype=np.uint8),
    np.asfortranarray(np.arange(6.0).reshape(2, 3)),  # Fortran order
    np.arange(20.0)[::3],  # strided view
]


@pytest.mark.parametrize("array", CASES, ids=lambda a: f"{a.dtype.str}{a.shape}")
def test_round_trip_and_flower_compatibility(array: np.ndarray) -> None:
    flower = Array(array)
    ours = encode_array(array)
    if array.flags.c_contiguous:
        assert ours.data == flower.data
    assert (ours.dtype, tuple(ours.shape), ours.stype) == (
        flower.dtype,
        tuple(array.shape),
        flower.stype,
    )
    for arr in (ours, flower):
        back = decode_array(arr)
        assert back.dtype == array.dtype
        assert back.shape == array.shape
        np.testing.assert_array_equal(back, array)
        assert back.flags.writeable


def test_state_dict_round_trip_matches_flower() -> None:
    torch.manual_seed(0)
    sd = CNN().state_dict()
    ours, flower = state_dict_to_record(sd), ArrayRecord(sd)
    assert list(ours) == list(flower)
    assert all(ours[k].data == flower[k].data for k in sd)
    back = record_to_state_dict(flower)
    reference = flower.to_torch_state_dict()
    for k in sd:
        assert torch.equal(back[k], reference[k])
        assert back[k].dtype == sd[k].dtype


def test_unusual_arrays_fall_back_to_flower() -> None:
    # metadata that disagrees with the .npy payload: whatever Flower's own decoder does
    mismatched = Array(
        dtype="float32", shape=(4,), stype="numpy.ndarray", data=Array(np.ones(2, np.float32)).data
    )
    np.testing.assert_array_equal(decode_array(mismatched), mismatched.numpy())
    assert decode_array(mismatched).shape == (2,)
    other = Array(dtype="float32", shape=(1,), stype="torch.raw", data=b"\x00" * 4)
    with pytest.raises(TypeError, match="Unsupported serialization type"):
        decode_array(other)
