"""dvar.torch: load equals the NumPy read (bfloat16 as torch.bfloat16),
save -> load round trips a state_dict, names and devices. Skipped, saying
so, where PyTorch is not installed."""

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (Debian: apt-get install python3-torch): "
                    "dvar.torch cannot be tested here")

import dvar  # noqa: E402
import dvar.torch as dt  # noqa: E402

from conftest import fixture_path  # noqa: E402


def test_load_equals_numpy():
    for path in (fixture_path("v1"), fixture_path("tf", "optimizer_slots", "variables")):
        sd = dt.load(path)
        cached = dt.load(path, cache=True)  # through the page cache: the same tensors
        assert list(cached) == list(sd)
        for name in sd:
            torch.testing.assert_close(cached[name], sd[name], rtol=0, atol=0, equal_nan=True)
        with dvar.open(path) as ck:
            numeric = [n for n in ck if ck[n].dvar_dtype != "string"]
            assert list(sd) == numeric
            for name in numeric:
                a = np.asarray(ck[name])
                x = sd[name]
                assert isinstance(x, torch.Tensor) and x.device.type == "cpu"
                assert tuple(x.shape) == a.shape
                if ck[name].dvar_dtype == "bfloat16":
                    assert x.dtype == torch.bfloat16
                    np.testing.assert_array_equal(x.float().numpy(), a)
                else:
                    np.testing.assert_array_equal(x.numpy(), a)


def test_save_load_round_trip(tmp_path):
    g = torch.Generator().manual_seed(7)
    sd = {
        "emb.weight": torch.randn(100, 8, generator=g),
        "fc.weight": torch.randn(8, 4, generator=g).t(),  # non-contiguous
        "fc.bias": torch.randn(4, generator=g).to(torch.bfloat16),
        "steps": torch.tensor(12, dtype=torch.int64),
        "mask": torch.tensor([True, False]),
        "half": torch.randn(3, generator=g).half(),
    }
    dt.save(str(tmp_path / "c"), sd, shards={"emb.weight": 4}, fsync=False)
    with dvar.open(str(tmp_path / "c")) as ck:
        assert len(ck.info("emb.weight").slices) == 4
        assert ck.info("fc.bias").dtype == "bfloat16"
    back = dt.load(str(tmp_path / "c"))
    assert list(back) == sorted(sd)
    for name, x in sd.items():
        assert back[name].dtype == x.dtype, name
        assert torch.equal(back[name], x.contiguous()), name
    only = dt.load(str(tmp_path / "c"), names=["steps", "fc.bias"])
    assert list(only) == ["steps", "fc.bias"] and only["steps"].item() == 12


def test_strings_and_devices(tmp_path):
    p = fixture_path("tf", "vars_and_arithmetic", "variables")
    assert "_CHECKPOINTABLE_OBJECT_GRAPH" not in dt.load(p)
    with pytest.raises(TypeError, match="string"):
        dt.load(p, names=["_CHECKPOINTABLE_OBJECT_GRAPH"])
    with pytest.raises(dvar.NotFound):
        dt.load(p, names=["nope"])
    if torch.cuda.is_available():
        x = dt.load(p, device="cuda:0")["x/.ATTRIBUTES/VARIABLE_VALUE"]
        assert x.device.type == "cuda" and x.item() == 1.0
