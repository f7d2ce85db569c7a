"""In-process recovery: the survivors of a rank's death re-form the process
group at a new generation and hand the returning rank its state from memory
(docs/checkpoint-protocol.md, "In-process recovery").

The rendezvous store is the TCPStore that global rank 0's supervisor
(_supervise.py) hosts at MASTER_ADDR:MASTER_PORT: it outlives every
trainer. Each generation's group lives under the store prefix torch's
agent-store mode uses (/worker/attempt_<generation>), so a trainer's
unchanged init_process_group("gloo") joins the generation its supervisor
names in TORCHELASTIC_RESTART_COUNT.

Imports torch only when a recovery or a handoff runs.
"""

import datetime
import io
import json
import logging
import os
import time

from . import _codec as codec
from . import _exit as exiting
from . import _peer as peer
from . import _protocol as proto
from . import _storage as storage
from . import _wire as wire

log = logging.getLogger("trainguard")

ENV_SUPERVISED = peer.ENV_SUPERVISED
ENV_TIMEOUT = "TRAINGUARD_REFORM_TIMEOUT"
DEFAULT_TIMEOUT = 30.0
PREFIX = "/worker/attempt_%d"
_POLL = 0.01


def enabled(env):
    """Whether this trainer runs under trainguard's supervisor, with the store there."""
    return env.get(ENV_SUPERVISED) == "1" and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" \
        and bool(env.get("MASTER_PORT"))


def generation(env):
    """The generation this process joined first (its supervisor's), 0 when unsupervised."""
    try:
        return int(env.get("TORCHELASTIC_RESTART_COUNT", "0")) if enabled(env) else 0
    except ValueError:
        return 0


def timeout(env):
    return max(0.0, proto._duration_seconds(env.get(ENV_TIMEOUT), DEFAULT_TIMEOUT))


def connect(env, wait, master=False):
    """A client of the job's store (or, master, the store itself)."""
    from torch.distributed import TCPStore
    host = "127.0.0.1" if master else env.get("MASTER_ADDR", "127.0.0.1")
    return TCPStore(host, int(env["MASTER_PORT"]), None, master, datetime.timedelta(seconds=max(wait, 1.0)),
                    **({"wait_for_workers": False} if master else {}))


def join_generation(store, rank):
    """The generation rank (re)joins: one past the last it joined, or the
    job's current one if that is newer. The job's is raised to it, so the
    survivors and a restarted rank meet at the same generation whoever
    asks first."""
    last = store.add("rank_%d/generation" % rank, 0)
    while True:
        current = store.add("generation", 0)
        target = max(last + 1, current)
        if current == target:
            break
        store.compare_set("generation", str(current), str(target))
    store.set("rank_%d/generation" % rank, str(target))
    return target


def replaced(store, rank, joined):
    """Whether the store is not the one this process joined at generation
    joined: a new store (rank 0's pod was replaced, and MASTER_ADDR now
    names its successor) has no record of rank's generations. A survivor
    must not join it: its joining would count it in for the new job's
    first generation, and the restarted rank of its own pod would then
    skip past the generation the new rank 0 waits at."""
    return joined >= 1 and store.add("rank_%d/generation" % rank, 0) < joined


def arrive(store, gen):
    """Count this trainer in for gen (listening() of a restarted trainer, a survivor)."""
    return store.add(PREFIX % gen + "/arrived", 1)


def wait_arrivals(store, gen, world, deadline):
    """Whether every rank arrived at gen before the deadline (monotonic)."""
    while store.add(PREFIX % gen + "/arrived", 0) < world:
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL)
    return True


# ----------------------------------------------------------------- the state

def _shape(v):
    shape = getattr(v, "shape", None)
    if shape is not None and hasattr(v, "dtype"):
        return "%s%s" % (str(v.dtype).replace("torch.", ""), list(shape))
    return type(v).__name__


def signature(objects):
    """What a peer's state must match before any of it is loaded: each
    registered object's tensors (keys, shapes, dtypes); for an optimizer
    the number of parameters in each group (its per-parameter state is
    empty until its first step); dicts and lists only by kind."""
    sig = {}
    for name, obj in objects.items():
        if hasattr(obj, "param_groups") and hasattr(obj, "state_dict"):
            sig[name] = {"param groups": [len(g["params"]) for g in obj.param_groups]}
        elif hasattr(obj, "state_dict"):
            sig[name] = {k: _shape(v) for k, v in obj.state_dict().items()}
        else:
            sig[name] = type(obj).__name__
    return sig


def mismatch(mine, theirs):
    """The first difference between two signatures, named, or ""."""
    for name in sorted(set(mine) | set(theirs)):
        if name not in theirs:
            return "%s: registered here, not in the peer's state" % name
        if name not in mine:
            return "%s: in the peer's state, not registered here" % name
        a, b = mine[name], theirs[name]
        if not isinstance(a, dict) or not isinstance(b, dict):
            if a != b:
                return "%s: %s in the peer's state, %s here" % (name, b, a)
            continue
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return "%s: %s: %s in the peer's state, %s here" % (name, key, b.get(key, "missing"),
                                                                     a.get(key, "missing"))
    return ""


def _tensor_bytes(torch, obj):
    """The bytes of the tensors in a captured state (dicts, lists, tuples)."""
    if torch.is_tensor(obj):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(torch, v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(torch, v) for v in obj)
    return 0


def _count(v, limit=1 << 62):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= limit


def _signature_ok(sig):
    return isinstance(sig, dict) and all(
        isinstance(v, str) or (isinstance(v, dict) and all(isinstance(x, (str, list)) for x in v.values()))
        for v in sig.values())


def _check_info(r, info):
    """A rank's announcement, as exchange() sends it; PeerBytes otherwise."""
    if not (isinstance(info, dict) and info.get("rank") == r and isinstance(info.get("holds"), bool)
            and _count(info.get("step")) and _count(info.get("bytes")) and _signature_ok(info.get("sig"))):
        raise wire.PeerBytes("rank %d sent an announcement no trainguard rank sends (rank, holds, step, bytes, "
                             "sig); nothing of it is read" % r)
    return info


def _state_limit(own):
    """The most state a rank takes from a peer: a returning rank's own
    tensors (a fresh optimizer holds none yet: Adam's two moments per
    parameter, and more, come on top) eight times over, and 256 MiB."""
    return 8 * own + (256 << 20)


def _received_signature(mine, states):
    """signature() of the objects states would fill, as mine names them:
    what src sent, not what it announced."""
    sig = {}
    for key, st in states.items():
        name = str(key)  # a planted int key would not sort beside the names
        want = mine.get(name)
        if isinstance(want, dict) and "param groups" in want and isinstance(st, dict):
            groups = st.get("param_groups")
            sig[name] = {"param groups": [len(g["params"]) if isinstance(g, dict) and isinstance(g.get("params"), list)
                                          else None for g in groups] if isinstance(groups, list) else None}
        elif isinstance(want, dict) and isinstance(st, dict):
            sig[name] = {str(k): _shape(v) for k, v in st.items()}
        else:
            sig[name] = type(st).__name__
    return sig


def _decode_state(torch, doc, blob, src, step, mine):
    """The payload in src's bytes, read as the checkpoint format is
    (tagged JSON; tensors with the restricted unpickler) and matching mine
    (this rank's signature): raises wire.PeerBytes for anything else."""
    what = "the state rank %d sent" % src
    try:
        payload = codec.decode(wire.loads(doc, "rank %d" % src, "its state"), storage.tensors_of(what, blob, torch))
    except storage.CorruptCheckpoint as e:
        raise wire.PeerBytes(str(e)) from None
    except wire.PeerBytes:
        raise
    except (ValueError, TypeError, RecursionError) as e:
        raise wire.PeerBytes("%s: %s: %s" % (what, type(e).__name__, e)) from None
    rng = payload.get("rng") if isinstance(payload, dict) else None
    if not (isinstance(payload, dict) and payload.get("step") == step and isinstance(payload.get("states"), dict)
            and (rng is None or (torch.is_tensor(rng) and rng.dtype == torch.uint8 and rng.dim() == 1))):
        raise wire.PeerBytes("%s is not the state of step %d (step, states, rng)" % (what, step))
    why = mismatch(mine, _received_signature(mine, payload["states"]))
    if why:  # load_state_dict would raise in the trainer: exit 1, the job failed for good
        raise wire.PeerBytes("%s is not the state it announced: %s" % (what, why))
    return payload


def exchange(dist, state, holds):
    """Run by every rank of a new generation, survivors (holds: their state
    is that of completed step state.step) and restarted ranks alike. Returns
    ("none", None): no rank holds a state; ("refused", why); ("sent", src)
    for a rank that needs nothing; or ("received", payload). What a peer
    sends is hostile (_wire.py): nothing of it is unpickled, and what no
    trainguard rank sends raises wire.PeerBytes on every rank."""
    import torch
    rank, step = dist.get_rank(), state.step
    captured = state.capture()
    own = _tensor_bytes(torch, captured)
    infos = wire.gather_json(dist, {"rank": rank, "holds": bool(holds), "step": int(step), "bytes": own,
                                    "sig": signature(state.objects)}, "an announcement")
    infos = [_check_info(r, i) for r, i in enumerate(infos)]
    holders = [i for i in infos if i["holds"]]
    if not holders:
        return "none", None
    newest = max(i["step"] for i in holders)
    src = min(i["rank"] for i in holders if i["step"] == newest)
    needs = not (holds and step == newest)
    verdict, doc, blob = "", b"", b""
    if rank == src:
        try:
            tensors = []
            doc = json.dumps(codec.encode({"step": newest, "saved_at": time.time(), "rng": torch.get_rng_state(),
                                           "states": captured}, tensors, torch.is_tensor)).encode()
            buf = io.BytesIO()
            torch.save(tensors, buf)
            blob = buf.getvalue()
        except TypeError as e:  # what no checkpoint could hold either
            verdict = "rank %d cannot send its state: %s" % (rank, e)
    if needs:
        # Both signatures as JSON carried them, so they compare alike.
        why = mismatch(infos[rank]["sig"], infos[src]["sig"])
        if not why and infos[src]["bytes"] > _state_limit(own):
            why = "it announces %d bytes of tensors, more than %d" % (infos[src]["bytes"], _state_limit(own))
        if why:
            verdict = "rank %d refused the state of rank %d: %s" % (rank, src, why)
    verdicts = wire.gather_json(dist, verdict, "a verdict")
    refused = [v if isinstance(v, str) else "rank %d sent a verdict that is not a string" % r
               for r, v in enumerate(verdicts) if v]
    if refused:
        return "refused", "; ".join(refused)
    # Every rank bounds the state by what src announced (and the ranks that
    # need it checked that against their own), so all allocate alike.
    doc = wire.broadcast_bytes(dist, doc, src, wire.MAX_JSON, "its state's document")
    blob = wire.broadcast_bytes(dist, blob, src, 2 * infos[src]["bytes"] + (64 << 20), "its state's tensors")
    if not needs:
        return "sent", src
    payload = _decode_state(torch, doc, blob, src, newest, infos[rank]["sig"])
    payload["from"] = src
    payload["bytes"] = len(doc) + len(blob)
    return "received", payload


# ------------------------------------------------------------ the part

# Recovery.received() when this rank alone must load the checkpoint: the
# returning rank refused the state and the survivors are leaving.
ALONE = "alone"
PEER_NAME = "peer:"  # a peer's state is named peer:rank<R>; no checkpoint on the volume is


def restore_rng(payload):
    """A peer's payload carries its torch RNG state: the returning rank draws what the survivor would."""
    if payload.get("rng") is not None:
        import torch
        torch.set_rng_state(payload["rng"])


class Recovery:
    """The Migrator's part for in-process recovery. steps() drives the
    training loop; recover() is what step() calls when a collective failed
    because a peer is gone (True: the group is whole again); received() is
    what a restarted trainer's checkpoint choice asks first (a survivor's
    state); arrive() counts a restarted trainer in when it starts listening.

    state: the _state.State; peer_loss: the _peer.PeerLoss whose heartbeat
    watch pauses while re-forming."""

    def __init__(self, settings, state, peer_loss):
        self._settings, self._state, self._peer_loss = settings, state, peer_loss
        self.driven = False
        self._joined = None  # the generation of the last re-formation, None: the supervisor's
        self.exit_code = peer.EXIT_PEER_LOST  # when recover() returns False

    @property
    def _env(self):
        return self._settings.env

    def arrive(self):
        """A trainer its supervisor restarted counts itself in for its
        generation: the survivors wait for every rank before joining."""
        gen = generation(self._env)
        if gen <= 1:
            return
        try:
            arrive(connect(self._env, timeout(self._env)), gen)
        except Exception as e:  # the survivors time out into the present path
            log.warning("trainguard: cannot count in for generation %d: %s: %s", gen, type(e).__name__, e)

    def steps(self, total):
        self.driven = True
        try:
            while self._state.step < total:
                yield self._state.step
        finally:
            self.driven = False

    def received(self, dist):
        """(name, payload) of a survivor's state, ALONE when it was refused
        (load the checkpoint without the others), None when nobody holds one
        (every trainer restarted) or this trainer was not restarted."""
        if generation(self._env) <= 1:
            return None
        try:
            what, detail = exchange(dist, self._state, False)
        except wire.PeerBytes as e:  # every rank raised alike: the group cannot go on
            log.error("trainguard: rank %d: re-forming: %s; loading the checkpoint", dist.get_rank(), e)
            return ALONE
        if what == "received":
            log.info("trainguard: rank %d: the state of step %d from rank %d's memory (%d bytes), no checkpoint read",
                     dist.get_rank(), detail["step"], detail["from"], detail["bytes"])
            return "%srank%d" % (PEER_NAME, detail["from"]), detail
        if what == "refused":
            log.error("trainguard: %s; nothing of it is loaded: loading the checkpoint", detail)
            return ALONE
        log.info("trainguard: no surviving rank holds the state; loading the checkpoint")
        return None

    def refusal(self):
        """Why this survivor cannot hand its state on (re-forming then serves
        nothing), or ""."""
        state = self._state
        if not self.driven:
            return ("the training loop is not driven by migrator.steps(): the abandoned step could not be taken "
                    "again")
        if peer.data_parallel(state.objects) is not None:
            return "a DistributedDataParallel is registered: its reducer is bound to the process group that failed"
        if peer.sharded(state.objects):
            return "the state is sharded: this rank does not hold all of it"
        if not state.replicated:
            return "the state is not declared replicated (migrator.replicated())"
        if state.optimizer_steps.watched == 0:
            return "no optimizer is registered, so the SDK cannot tell a completed step from a torn one"
        if state.torn():
            return "the optimizer stepped after step %d completed: the state is between two steps" % state.step
        return ""

    def recover(self, exc, why):
        """A survivor's re-formation: True when the group is whole again at
        a new generation (training goes on at the step abandoned); False for
        the present path (dying gasp, exit 138). When the returning rank
        refuses the state, exits 138 without a gasp."""
        self.exit_code = peer.EXIT_PEER_LOST
        try:
            return self._recover(exc, why)
        except Refused as e:
            self._peer_loss.quiet()
            log.error("trainguard: rank %d: %s; exiting %d without a dying gasp (the returning rank runs other "
                      "code): the job restarts from the checkpoint", self._settings.config.rank, e,
                      peer.EXIT_PEER_LOST)
            exiting.flush_output()
            # os._exit, not SystemExit: the interpreter's teardown of the
            # re-formed gloo group can abort (SIGABRT), and a supervisor
            # restarts a trainer that died of a signal; 138 is passed on.
            os._exit(peer.EXIT_PEER_LOST)

    def _recover(self, exc, why):
        env, cfg = self._env, self._settings.config
        if not enabled(env):
            return False
        no = self.refusal()
        if no:
            log.warning("trainguard: rank %d: no in-process recovery: %s", cfg.rank, no)
            return False
        bound = timeout(env)
        log.warning("trainguard: rank %d: a peer is gone (%s: %s); re-forming the group in this process (pid %d) "
                    "after step %d, up to %gs (%s)", cfg.rank, why, str(exc).splitlines()[0] if str(exc) else "",
                    os.getpid(), self._state.step, bound, ENV_TIMEOUT)
        started = time.monotonic()
        deadline = started + bound
        import torch.distributed as dist
        backend = "gloo"
        try:
            backend = dist.get_backend()
            rank, world = dist.get_rank(), dist.get_world_size()
            dist.destroy_process_group()
        except Exception as e:  # torn down already
            log.info("trainguard: destroy_process_group: %s: %s", type(e).__name__, e)
            rank, world = cfg.rank, cfg.world_size
        self._peer_loss.paused = True  # the restarted peer is the one awaited
        try:
            try:
                store = connect(env, bound)
            except Exception as e:
                # Rank 0's pod is gone with the store: the group goes on only
                # with its successor's, which a new trainer of this container
                # joins when it comes (as the kubelet's restart would, without
                # its back-off).
                self.exit_code = self._peer_loss.rejoin_code()
                log.error("trainguard: rank %d: the job's rendezvous store at %s:%s did not answer within %gs (%s): "
                          "%s: %s; exiting %d", rank, env.get("MASTER_ADDR"), env.get("MASTER_PORT"), bound,
                          ENV_TIMEOUT, type(e).__name__, e, self.exit_code)
                return False
            joined = self._joined if self._joined is not None else generation(env)
            if replaced(store, rank, joined):
                # The new rank 0 waits at its first generation: a new
                # trainer of this container joins it there (the supervisor
                # starts one at once), this process cannot.
                self.exit_code = self._peer_loss.rejoin_code()
                log.error("trainguard: rank %d: the job's rendezvous store is not the one this process joined at "
                          "generation %d (rank 0's pod was replaced); exiting %d: the job restarts from "
                          "the checkpoint", rank, joined, self.exit_code)
                return False
            gen = join_generation(store, rank)
            arrive(store, gen)
            if not wait_arrivals(store, gen, world, deadline):
                log.error("trainguard: rank %d: the group did not re-form at generation %d within %gs (%s); "
                          "exiting %d (retryable)", rank, gen, bound, ENV_TIMEOUT, peer.EXIT_PEER_LOST)
                return False
            joined = time.monotonic()
            from torch.distributed import PrefixStore
            # The keys an env:// init_process_group of the restarted trainer
            # uses: torch's agent-store prefix, then its own "default_pg".
            group_store = PrefixStore("default_pg", PrefixStore(PREFIX % gen, store))
            dist.init_process_group(backend, store=group_store, rank=rank, world_size=world)
            what, detail = exchange(dist, self._state, True)
        except Exception as e:
            log.error("trainguard: rank %d: re-forming the group failed: %s: %s", rank, type(e).__name__, e)
            return False
        finally:
            self._peer_loss.paused = False
        if what == "refused":
            raise Refused(detail)
        self._joined = gen
        self._peer_loss.reset_peers()  # the returning rank's incarnation is a peer now, not a restart
        log.warning("trainguard: rank %d: re-formed the group at generation %d in %.2fs (waited %.2fs for the other "
                    "ranks); %s; training again at step %d", rank, gen, time.monotonic() - started, joined - started,
                    "sent the state of step %d" % self._state.step if detail == rank else
                    "rank %s sent the state" % detail, self._state.step + 1)
        return True


class Refused(Exception):
    """The returning rank refused the state: the job restarts from the checkpoint."""
