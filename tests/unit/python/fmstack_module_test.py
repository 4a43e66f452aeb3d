"""The Python module over libfmstack: round trips, resharding, bad input."""
import glob
import os
import tempfile
import unittest

import numpy as np
import torch

import fmstack


def sample_state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 16)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3, "name": "run-a",
            "half": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
            "ids": np.arange(5, dtype=np.int32), "pair": (torch.ones(2), None)}


def assert_same(test, a, b, path="state"):
    if isinstance(a, dict):
        test.assertEqual(list(a), list(b), path)
        for k in a:
            assert_same(test, a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        test.assertEqual(type(a), type(b), path)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(test, x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        test.assertTrue(np.array_equal(a, np.asarray(b)), path)
    elif isinstance(a, torch.Tensor):
        test.assertEqual(a.dtype, b.dtype, path)
        test.assertTrue(torch.equal(a, b), path)
    else:
        test.assertEqual(a, b, path)


class ModuleTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "ckpt")

    def tearDown(self):
        self.tmp.cleanup()

    def test_round_trip_of_a_nested_state(self):
        state = sample_state()
        with fmstack.Checkpointer(self.dir, rank=0, world=1) as ck:
            self.assertGreaterEqual(ck.save(7, state), 0.0)
        ck = fmstack.Checkpointer(self.dir, rank=0, world=1)
        self.assertEqual(ck.latest(), 7)
        step, got = ck.load(like={"model": state["model"]})
        self.assertEqual(step, 7)
        assert_same(self, state, got)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                    torch.nn.Linear(32, 4))
        model.load_state_dict(got["model"])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        opt.load_state_dict(got["optim"])

    def test_a_live_save_reads_the_tensors_until_release(self):
        torch.manual_seed(1)
        # Large enough for several 8 MiB chunks, each tensor padded to its
        # address (ckpt's live save), beside small ones.
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.Linear(4096, 1024))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(torch.randn(2, 1024)).sum().backward()
        opt.step()
        state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 1}
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        with fmstack.Checkpointer(self.dir, rank=0, world=1) as ck:
            self.assertLess(ck.save(5, state, live=True), 1.0)
            model(torch.randn(2, 1024)).sum().backward()  # the next step's passes
            self.assertGreaterEqual(ck.release(), 0.0)
            opt.step()  # changes the tensors: after the release, the save must not see it
            self.assertEqual(ck.release(), 0.0)  # none pending
            for v in model.parameters():
                v.data.add_(1.0)
            ck.wait()
            self.assertEqual(ck.latest(), 5)
        step, got = fmstack.Checkpointer(self.dir, rank=0, world=1).load()
        self.assertEqual(step, 5)
        for k, v in saved.items():
            self.assertTrue(torch.equal(got["model"][k], v), k)

    def test_the_next_save_releases_a_pending_live_save(self):
        state = sample_state()
        with fmstack.Checkpointer(self.dir, rank=0, world=1) as ck:
            ck.save(1, state, live=True)
            ck.save(2, state)  # releases step 1 first
        ck = fmstack.Checkpointer(self.dir, rank=0, world=1)
        self.assertEqual(ck.latest(), 2)
        assert_same(self, state, ck.load(step=1)[1])

    def test_saved_by_two_ranks_loaded_by_one(self):
        state = sample_state()
        cks = [fmstack.Checkpointer(self.dir, rank=r, world=2, commit_timeout=30) for r in (0, 1)]
        for ck in reversed(cks):
            ck.save(4, state)
        for ck in cks:
            ck.wait()
        self.assertEqual(len(glob.glob(os.path.join(self.dir, "step-00000004", "rank-*.safetensors"))), 2)
        step, got = fmstack.Checkpointer(self.dir, rank=0, world=1).load()
        self.assertEqual(step, 4)
        assert_same(self, state, got)

    def test_bad_input_is_refused_before_anything_is_written(self):
        ck = fmstack.Checkpointer(self.dir, rank=0, world=1)
        ck.save(1, {"w": torch.ones(3)})
        ck.wait()
        cases = [
            ({"w": torch.zeros(4, 4).t()}, ValueError, "state['w']: the tensor is not contiguous"),
            ({"w": torch.zeros(3, dtype=torch.float64)}, TypeError, "dtype torch.float64"),
            ({"w": torch.empty(3, device="meta")}, ValueError, "the tensor is on meta"),
            ({"w": np.zeros(3, dtype=np.complex64)}, TypeError, "numpy dtype complex64"),
            ({"w": {1.5: torch.ones(1)}}, TypeError, "key 1.5 is neither str nor int"),
            ({"a": {"b": torch.ones(1)}, "a.b": torch.ones(1)}, ValueError, "name 'a.b' is taken"),
            ({"ok": torch.ones(2), "f": open}, TypeError,
             "state['f']: a 'builtin_function_or_method' object cannot be saved"),
        ]
        for state, kind, text in cases:
            with self.assertRaises(kind) as e:
                ck.save(2, state)
            self.assertIn(text, str(e.exception))
        ck.wait()
        self.assertEqual(ck.latest(), 1)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "step-00000002")))

    def test_a_checkpoint_of_another_model_is_refused_by_name_and_shape(self):
        ck = fmstack.Checkpointer(self.dir, rank=0, world=1)
        ck.save(3, {"model": torch.nn.Linear(8, 4).state_dict()})
        ck.wait()
        with self.assertRaises(fmstack.CheckpointMismatch) as e:
            ck.load(like={"model": torch.nn.Linear(8, 5).state_dict()})
        self.assertIn("model.weight: saved F32 [4, 8], expected F32 [5, 8]", str(e.exception))
        with self.assertRaises(fmstack.CheckpointMismatch) as e:
            ck.load(like={"model": torch.nn.Sequential(torch.nn.Linear(8, 4)).state_dict()})
        self.assertIn("model.0.weight: missing from the checkpoint", str(e.exception))

    def test_a_corrupt_newest_copy_falls_back_to_the_previous_step(self):
        ck = fmstack.Checkpointer(self.dir, rank=0, world=1)
        ck.save(1, {"w": torch.full((1000,), 1.0)})
        ck.save(2, {"w": torch.full((1000,), 2.0)})
        ck.wait()
        shard = os.path.join(self.dir, "step-00000002", "rank-00000.safetensors")
        with open(shard, "r+b") as f:
            f.seek(-8, os.SEEK_END)
            f.write(b"\xff" * 8)
        step, got = fmstack.Checkpointer(self.dir, rank=0, world=1).load()
        self.assertEqual(step, 1)
        self.assertTrue(torch.equal(got["w"], torch.full((1000,), 1.0)))

    def test_library_errors_name_the_problem(self):
        with self.assertRaises(fmstack.Error) as e:
            fmstack.Checkpointer(self.dir, rank=2, world=2)
        self.assertIn("rank 2 of world 2", str(e.exception))
        self.assertIsNone(fmstack.Checkpointer(self.dir, rank=0, world=1).load())

    def test_run_outside_fmstack_run_is_inactive(self):
        os.environ.pop("FMSTACK_CONTROL_FD", None)
        run = fmstack.Run()
        self.assertFalse(run.active)
        run.step(1, 0.1, 10)  # no-ops
        run.close()


if __name__ == "__main__":
    unittest.main()
