"""What a checkpoint may contain, and how it is read back without running code.

A registered object's state is split in two: every tensor goes into one list
saved with torch.save, and everything else (numbers, strings, None, lists,
tuples, dicts, OrderedDicts) becomes tagged JSON in which each tensor is a
reference into that list. Nothing else can be stored; saving an unsupported
type raises TypeError naming where it is.

Reading the tensor list uses torch.load with a restricted pickle module whose
find_class admits only torch's tensor and storage rebuild functions and plain
containers, so a planted file cannot name os.system or any other callable.
This works on torch 1.13, whose weights_only=True refuses Python floats (a
plain Adam state_dict), and on newer torch alike: the tensor file holds only
tensors, and floats live in the JSON.
"""

import collections
import inspect
import math
import pickle

# A tag object is a JSON object with exactly one of these keys.
_TENSOR, _TUPLE, _DICT, _ODICT, _FLOAT = "__tensor__", "__tuple__", "__dict__", "__odict__", "__float__"
_TAGS = frozenset((_TENSOR, _TUPLE, _DICT, _ODICT, _FLOAT))


class UnsafeCheckpoint(Exception):
    """The file names something the restricted unpickler refuses."""


def encode(obj, tensors, is_tensor, where="state"):
    """obj as JSON-able data; tensors are appended to the list `tensors` once each."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {_FLOAT: repr(obj)}
    if is_tensor(obj):
        for i, t in enumerate(tensors):
            if t is obj:
                return {_TENSOR: i}
        tensors.append(obj)
        return {_TENSOR: len(tensors) - 1}
    if isinstance(obj, tuple):
        return {_TUPLE: [encode(v, tensors, is_tensor, "%s[%d]" % (where, i)) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode(v, tensors, is_tensor, "%s[%d]" % (where, i)) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        return _encode_dict(obj, tensors, is_tensor, where)
    raise TypeError("trainguard: cannot checkpoint %s (%s): a checkpoint holds only tensors, numbers, "
                    "strings, None and lists, tuples and dicts of them" % (where, type(obj).__name__))


def _encode_dict(obj, tensors, is_tensor, where):
    items = [[encode(k, tensors, is_tensor, "%s key %r" % (where, k)),
              encode(v, tensors, is_tensor, "%s[%r]" % (where, k))] for k, v in obj.items()]
    if isinstance(obj, collections.OrderedDict):
        # Module state_dicts carry _metadata (per-module versions) that load_state_dict reads.
        meta = getattr(obj, "_metadata", None)
        return {_ODICT: {"items": items,
                         "metadata": None if meta is None else encode(meta, tensors, is_tensor, where + "._metadata")}}
    if all(isinstance(k, str) for k in obj) and not (len(obj) == 1 and next(iter(obj)) in _TAGS):
        return {k: v for k, v in zip(obj, (item[1] for item in items))}
    return {_DICT: items}  # int keys (optimizer state) or a key that looks like a tag


def decode(data, tensors):
    """The inverse of encode; raises ValueError on anything encode cannot have written."""
    if isinstance(data, list):
        return [decode(v, tensors) for v in data]
    if not isinstance(data, dict):
        return data
    if len(data) == 1:
        (tag, body), = data.items()
        if tag == _TENSOR:
            if not isinstance(body, int) or isinstance(body, bool) or not 0 <= body < len(tensors):
                raise ValueError("tensor reference %r out of range (%d tensors)" % (body, len(tensors)))
            return tensors[body]
        if tag == _TUPLE:
            return tuple(decode(v, tensors) for v in _list(body))
        if tag == _DICT:
            return {_key(decode(k, tensors)): decode(v, tensors) for k, v in _pairs(body)}
        if tag == _ODICT:
            return _decode_odict(body, tensors)
        if tag == _FLOAT:
            if body not in ("nan", "inf", "-inf"):
                raise ValueError("bad float %r" % (body,))
            return float(body)
    return {k: decode(v, tensors) for k, v in data.items()}


def _decode_odict(body, tensors):
    if not isinstance(body, dict):
        raise ValueError("bad OrderedDict encoding")
    out = collections.OrderedDict((_key(decode(k, tensors)), decode(v, tensors)) for k, v in _pairs(body.get("items")))
    if body.get("metadata") is not None:
        out._metadata = decode(body["metadata"], tensors)
    return out


def _list(v):
    if not isinstance(v, list):
        raise ValueError("expected a list, got %s" % type(v).__name__)
    return v


def _pairs(v):
    pairs = _list(v)
    if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise ValueError("expected [key, value] pairs")
    return pairs


def _key(k):
    if isinstance(k, (list, dict)):
        raise ValueError("unhashable dict key %r" % (k,))
    return k


# ---------------------------------------------------------------- safe load


def load_tensors(torch, f):
    """The tensor list, read with torch's restricted unpickler (weights_only=True),
    whose find_class admits only tensor and storage rebuild functions and
    plain containers. The file holds nothing else, which is why this works on
    torch 1.13 too. Raises UnsafeCheckpoint when the file names anything else."""
    if "weights_only" not in inspect.signature(torch.load).parameters:
        raise UnsafeCheckpoint("torch %s cannot load without unpickling arbitrary objects; trainguard "
                               "needs torch >= 1.13" % getattr(torch, "__version__", "?"))
    try:
        tensors = torch.load(f, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise UnsafeCheckpoint(str(e).split(". ")[-1] or str(e)) from e
    if not isinstance(tensors, list) or not all(torch.is_tensor(t) for t in tensors):
        raise UnsafeCheckpoint("the tensor file does not hold a list of tensors")
    return tensors
