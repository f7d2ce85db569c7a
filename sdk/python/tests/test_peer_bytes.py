"""A hostile peer in a re-formed group, with real processes and real
PyTorch: rank 1 returns and asks for the state (_reform.exchange), rank 0
sends what no trainguard rank sends. Whoever reaches the job's store at
MASTER_PORT can take a rank's place when the group re-forms, so nothing a
peer sends may run code. Torch-dependent: fails without torch."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from test_peer_process import free_port  # noqa: E402

# Both ranks: a model and an optimizer as a trainer registers them. Rank 1
# runs exchange(); rank 0 runs MODE:
#   pickle: the announcement as torch's all_gather_object sends it, a
#     pickle whose loading in rank 1 creates MARKER;
#   pickle-tensors: a valid announcement, then a state whose tensor file
#     is a torch.save of the same pickle;
#   huge: a valid announcement of a small state, then a tensor file
#     announced at 1 TiB;
#   mismatch: a valid announcement, then the state of another model (the
#     returning rank's load_state_dict would raise: exit 1, the job failed);
#   honest: exchange() (rank 0 holds the state of step 7).
SCRIPT = textwrap.dedent("""
    import datetime, io, json, os, sys
    import torch, torch.distributed as dist
    from trainguard import _codec as codec, _reform as reform, _state, _wire as wire

    class Evil:
        # Creates MARKER in the process that unpickles it, if that is rank 1
        # (all_gather_object unpickles the sender's own object too).
        def __reduce__(self):
            return (exec, ("import os; os.environ['RANK'] == '1' and open(os.environ['MARKER'], 'w').close()",))

    rank, mode = int(os.environ["RANK"]), os.environ["MODE"]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))  # importing torch under load
    torch.manual_seed(rank)
    model = torch.nn.Linear(4, 2)
    state = _state.State()
    state.register("model", model)
    state.register("optimizer", torch.optim.SGD(model.parameters(), lr=0.1))
    if rank == 1 or mode == "honest":
        state.step = 7 if rank == 0 else 0
        try:
            what, detail = reform.exchange(dist, state, rank == 0)
        except wire.PeerBytes as e:
            print("rank %d: PeerBytes: %s" % (rank, e), flush=True)
            # os._exit: the refusal is what is tested; a gloo group torn
            # down by the interpreter's exit while the peer is gone can
            # abort (terminate called without an active exception).
            os._exit(3)
        if what == "received":
            torch.manual_seed(0)  # rank 0's model
            want = torch.nn.Linear(4, 2).state_dict()
            same = all(torch.equal(detail["states"]["model"][k], v) for k, v in want.items())
            print("rank %d: received step %d, rank 0's weights: %s" % (rank, detail["step"], same), flush=True)
        else:
            print("rank %d: %s %r" % (rank, what, detail), flush=True)
        sys.exit(0)
    if mode == "pickle":
        dist.all_gather_object([None, None], Evil())
        sys.exit(0)
    info = {"rank": 0, "holds": True, "step": 7, "bytes": 64, "sig": reform.signature(state.objects)}
    wire.gather_json(dist, info, "an announcement")
    wire.gather_json(dist, "", "a verdict")
    buf, tensors = io.BytesIO(), []
    if mode == "mismatch":
        states = {"model": torch.nn.Linear(4, 3).state_dict(), "optimizer": state.objects["optimizer"].state_dict()}
        doc = json.dumps(codec.encode({"step": 7, "saved_at": 0.0, "rng": None, "states": states}, tensors,
                                      torch.is_tensor)).encode()
        torch.save(tensors, buf)
    else:
        doc = json.dumps({"step": 7, "saved_at": 0.0, "rng": None, "states": {"model": {"__tensor__": 0}}}).encode()
        torch.save([Evil()], buf)
    wire.broadcast_bytes(dist, doc, 0, wire.MAX_JSON, "its state's document")
    if mode == "huge":
        dist.broadcast(torch.tensor([1 << 40], dtype=torch.long), 0)
        sys.exit(0)
    wire.broadcast_bytes(dist, buf.getvalue(), 0, 1 << 30, "its state's tensors")
""")


class HostilePeer(unittest.TestCase):
    def run_ranks(self, mode):
        d = tempfile.mkdtemp(prefix="tg-peerbytes-")
        self.addCleanup(shutil.rmtree, d, True)
        script, marker = os.path.join(d, "rank.py"), os.path.join(d, "code-ran")
        with open(script, "w") as f:
            f.write(SCRIPT)
        port = str(free_port())
        procs = [subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, PYTHONPATH=SDK, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1",
                                           MASTER_PORT=port, WORLD_SIZE="2", RANK=str(r), MODE=mode, MARKER=marker))
                 for r in (0, 1)]
        outs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            outs.append(out.decode(errors="replace"))
        return procs[1].returncode, outs[1], os.path.exists(marker)

    def test_a_pickled_announcement_runs_no_code(self):
        code, out, ran = self.run_ranks("pickle")
        self.assertFalse(ran, "the peer's pickle ran in the returning rank:\n" + out)
        self.assertEqual(code, 3, out)
        self.assertIn("rank 0 sent an announcement that is not JSON", out)

    def test_a_pickled_tensor_file_runs_no_code(self):
        code, out, ran = self.run_ranks("pickle-tensors")
        self.assertFalse(ran, "the peer's pickle ran in the returning rank:\n" + out)
        self.assertEqual(code, 3, out)
        self.assertIn("the state rank 0 sent: UNSAFE, not loaded", out)

    def test_a_huge_state_is_refused_before_it_is_allocated(self):
        code, out, ran = self.run_ranks("huge")
        self.assertEqual(code, 3, out)
        self.assertIn("rank 0 announced 1099511627776 bytes of its state's tensors", out)

    def test_a_state_other_than_announced_is_refused_before_it_is_loaded(self):
        code, out, _ = self.run_ranks("mismatch")
        self.assertEqual(code, 3, out)
        self.assertIn("the state rank 0 sent is not the state it announced: model: bias: float32[3] in the peer's "
                      "state, float32[2] here", out)

    def test_an_honest_peer_hands_its_state_over(self):
        code, out, _ = self.run_ranks("honest")
        self.assertEqual(code, 0, out)
        self.assertIn("rank 1: received step 7, rank 0's weights: True", out)


if __name__ == "__main__":
    unittest.main()
