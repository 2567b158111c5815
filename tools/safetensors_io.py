#!/usr/bin/python3
"""safetensors without the safetensors package: a strict reader and a small writer.

Reads every file framechain writes (dumps, checkpoints) with only numpy:
    from safetensors_io import read_safetensors
    tensors, metadata = read_safetensors("runs/x/ckpt-00001000.safetensors")
Run as a script, it lists a file's tensors (name, dtype, shape) and metadata.
"""

import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))


class SafetensorsError(Exception):
    """A file that does not follow the safetensors format exactly."""


# dtype name -> (numpy dtype, bytes per element). BF16 is stored as uint16 and
# widened to float32 after reading (numpy has no bfloat16).
_ST_DTYPES = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U64": (np.dtype("<u8"), 8),
    "U32": (np.dtype("<u4"), 4),
    "U16": (np.dtype("<u2"), 2),
    "U8": (np.dtype("u1"), 1),
    "BOOL": (np.dtype("?"), 1),
}
_NP_TO_ST = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32", np.dtype("<f2"): "F16",
             np.dtype("<i4"): "I32", np.dtype("<i8"): "I64",
             np.dtype("u1"): "U8"}


def _no_duplicate_keys(pairs):
    """json object hook: a header with a repeated key is ambiguous, reject it."""
    d = {}
    for k, v in pairs:
        if k in d:
            raise SafetensorsError("duplicate key %r in header" % k)
        d[k] = v
    return d


def read_safetensors(path):
    """Read a safetensors file -> (dict name -> numpy array, metadata dict).

    Validates strictly: the header is a JSON object; every tensor entry has
    exactly dtype/shape/data_offsets; byte sizes equal numel * dtype size; the
    data ranges tile [0, data length) without gaps or overlaps; and
    8 + header length + data length equals the file size.
    """
    with open(path, "rb") as fh:
        blob = fh.read()
    where = "%s: " % path
    if len(blob) < 8:
        raise SafetensorsError(where + "file is %d bytes, shorter than the "
                               "8-byte header length" % len(blob))
    (hlen,) = struct.unpack("<Q", blob[:8])
    if hlen > len(blob) - 8:
        raise SafetensorsError(where + "header length %d exceeds the %d bytes "
                               "after it" % (hlen, len(blob) - 8))
    try:
        header = json.loads(blob[8:8 + hlen].decode("utf-8"),
                            object_pairs_hook=_no_duplicate_keys)
    except SafetensorsError as e:
        raise SafetensorsError(where + str(e))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError(where + "header is not valid UTF-8 JSON: %s" % e)
    if not isinstance(header, dict):
        raise SafetensorsError(where + "header is not a JSON object")

    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SafetensorsError(where + "__metadata__ must map strings to strings")

    data = memoryview(blob)[8 + hlen:]
    entries = []
    for name, info in header.items():
        w = where + "tensor %r: " % name
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(w + "entry must have exactly dtype, shape, "
                                   "data_offsets (got %r)" % (info,))
        dtype, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in _ST_DTYPES:
            raise SafetensorsError(w + "unknown dtype %r" % (dtype,))
        if not isinstance(shape, list) or not all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            raise SafetensorsError(w + "shape must be a list of non-negative "
                                   "integers (got %r)" % (shape,))
        if (not isinstance(offs, list) or len(offs) != 2 or not all(
                isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offs)
                or offs[0] > offs[1]):
            raise SafetensorsError(w + "data_offsets must be [begin, end] with "
                                   "0 <= begin <= end (got %r)" % (offs,))
        numel = 1
        for s in shape:
            numel *= s
        size = _ST_DTYPES[dtype][1]
        if offs[1] - offs[0] != numel * size:
            raise SafetensorsError(w + "byte range %r holds %d bytes but shape "
                                   "%r of %s needs %d" % (offs, offs[1] - offs[0],
                                                          shape, dtype, numel * size))
        entries.append((offs[0], offs[1], name, dtype, shape))

    # The ranges must tile the data section exactly, starting at 0.
    entries.sort(key=lambda e: (e[0], e[1]))
    pos = 0
    for begin, end, name, _, _ in entries:
        if begin != pos:
            raise SafetensorsError(where + "tensor %r starts at byte %d, expected "
                                   "%d (data ranges must be contiguous from 0)"
                                   % (name, begin, pos))
        pos = end
    if pos != len(data):
        raise SafetensorsError(where + "header (%d bytes) + data (%d bytes) + 8 "
                               "!= file size %d" % (hlen, pos, len(blob)))

    tensors = {}
    for begin, end, name, dtype, shape in entries:
        npdt = _ST_DTYPES[dtype][0]
        arr = np.frombuffer(data[begin:end], dtype=npdt).reshape(shape).copy()
        if dtype == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = arr
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None, dtypes=None, fsync=False):
    """Write dict name -> numpy array (in insertion order) as safetensors.

    Used by the self-test; the header is space-padded to a multiple of 8. dtypes: name -> the
    safetensors dtype of an array that holds another type's bits (BF16 as uint16, numpy having no
    bfloat16). fsync: the data on the disk before the function returns (a file then renamed into place).
    """
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks, pos = [], 0
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        # C order, keeping the shape: ascontiguousarray makes a 0-d array (a scalar, shape []) 1-d
        arr = np.require(arr, requirements="C") if arr.ndim else arr
        arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        dt = (dtypes or {}).get(name) or _NP_TO_ST.get(np.dtype(arr.dtype.str))
        if dt is None or _ST_DTYPES.get(dt, (0, 0))[1] != arr.dtype.itemsize:
            raise SafetensorsError("cannot write dtype %s%s" % (arr.dtype, " as " + dt if dt else ""))
        raw = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape),
                        "data_offsets": [pos, pos + len(raw)]}
        chunks.append(raw)
        pos += len(raw)
    hdr = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hdr += b" " * (-len(hdr) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(hdr)))
        fh.write(hdr)
        for raw in chunks:
            fh.write(raw)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())



def main(argv):
    if len(argv) != 2 or argv[1].startswith("-"):
        help_asked = argv[1:] in (["--help"], ["-h"])
        print("usage: tools/safetensors_io.py FILE.safetensors", file=sys.stdout if help_asked else sys.stderr)
        return 0 if help_asked else 2
    try:
        tensors, meta = read_safetensors(argv[1])
    except SafetensorsError as e:  # its message begins with the path
        print(str(e), file=sys.stderr)
        return 1
    except OSError as e:
        print("%s: %s" % (argv[1], e.strerror or e), file=sys.stderr)
        return 1
    for k, v in sorted(meta.items()):
        print("meta %s = %s" % (k, v))
    for name, arr in tensors.items():
        print("%-48s %-5s %s" % (name, arr.dtype, tuple(arr.shape)))
    return 0


if __name__ == "__main__":
    try:
        status = main(sys.argv)
        sys.stdout.flush()
    except BrokenPipeError:  # the listing's reader (head, say) stopped reading: no traceback for it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 0
    sys.exit(status)
