"""A GGUF read back: its metadata (a fast header reader) and its weights in the merged model's architecture.

`load` compares the GGUF's hyper-parameters with the merged config one by one (a wrong rope base or head size is
named), then asks transformers for the weights (`gguf_file`, with the merged config). Where transformers does not
read the architecture (GPT-NeoX) or its weights do not fit, they are taken by name through gguf-py's tensor map
into the merged model's architecture, the converter's rewrites undone.
"""

from __future__ import annotations

import contextlib
import functools
import struct
import sys
from pathlib import Path


class GGUFLoadError(RuntimeError):
    """The GGUF cannot be read back as the merged model: the message names the tensor or hyper-parameter."""


# GGUF value types (gguf-py's GGUFValueType) that are fixed-size scalars: struct format; 8 is a string, 9 an array.
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_kv(path: str | Path) -> dict:
    """A GGUF's key-value metadata as Python values, read from its header alone (the tensors are not touched).
    gguf-py's reader maps every token of a 150k vocabulary into its own numpy view: seconds, where this, walking
    the file's memory map, takes a fraction of one."""
    import mmap

    import numpy as np

    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24 or head[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    with mapped:
        _magic, _version, _tensors, n_kv = struct.unpack("<4sIQQ", head)
        at, cut = 24, f"{path} ends inside its GGUF header: the file is truncated"

        def take(n: int) -> bytes:  # a copy (mmap slices are bytes): no view outlives the map
            nonlocal at
            if at + n > len(mapped):
                raise ValueError(cut)
            at += n
            return mapped[at - n:at]

        def string() -> str:
            return take(int.from_bytes(take(8), "little")).decode("utf-8", errors="replace")

        def strings(n: int) -> list[str]:  # a vocabulary: one loop, no call per token
            nonlocal at
            out = []
            for _ in range(n):
                size = int.from_bytes(mapped[at:at + 8], "little")
                out.append(mapped[at + 8:at + 8 + size].decode("utf-8", errors="replace"))
                at += 8 + size
            if at > len(mapped):
                raise ValueError(cut)
            return out

        def value(kind: int):
            if kind == 8:
                return string()
            if kind == 9:
                sub, n = struct.unpack("<IQ", take(12))
                if sub in _SCALAR:
                    dtype = np.dtype("<" + _SCALAR[sub])
                    return np.frombuffer(take(n * dtype.itemsize), dtype).tolist()
                return strings(n) if sub == 8 else [value(sub) for _ in range(n)]
            fmt = "<" + _SCALAR[kind]
            return struct.unpack(fmt, take(struct.calcsize(fmt)))[0]

        kv = {}
        for _ in range(n_kv):
            key = string()
            kv[key] = value(struct.unpack("<I", take(4))[0])
    return kv


def compute_dtype(merged_dir: str | Path, device: str = "cpu"):
    """fp32 on the CPU when it fits in RAM (exact comparisons), else fp16: an 8B model is 32 GB in fp32, more than a
    Kaggle session's 29 GB; fp16 on a GPU. Both models of a comparison load in the same dtype."""
    import psutil
    import torch

    if device != "cpu":
        return torch.float16
    params = sum(p.stat().st_size for p in Path(merged_dir).glob("*.safetensors")) / 2  # the merged model is fp16
    return torch.float32 if psutil.virtual_memory().available >= params * 4 * 1.25 else torch.float16


def load_merged(folder: str | Path, device: str = "cpu", dtype=None):
    """The merged model in the comparison's dtype."""
    return _transformers(Path(folder), None, device, dtype or compute_dtype(folder, device))


def _transformers(folder: Path, gguf_file: str | None, device: str, dtype, config=None):
    from transformers import AutoModelForCausalLM

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    kwargs |= {"config": config} if config is not None else {}
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, device_map={"": device}, **kwargs).eval()


def load(gguf_file: str | Path, merged_dir: str | Path, device: str = "cpu", dtype=None, kv: dict | None = None):
    """(model, how it was read): the GGUF's hyper-parameters checked against the merged config, then its weights
    through transformers' GGUF loader (which undoes the converter's rewrites), else by tensor name.

    transformers is given the merged config: left to build its own from the GGUF, it parses the whole file twice
    (gguf-py slices each of a 150k vocabulary's tokens and merges out of the file: seconds a parse for Llama 3),
    and the hyper-parameters it would take from there are the ones `hparam_problems` compares. Where the converter
    wrote the model as another architecture (Mistral as llama), transformers builds its config from the GGUF."""
    from transformers import AutoConfig

    gguf_file, dtype = Path(gguf_file), dtype or compute_dtype(merged_dir, device)
    config = AutoConfig.from_pretrained(merged_dir)
    kv = kv if kv is not None else read_kv(gguf_file)  # the caller's, when it has read them already
    problems = hparam_problems(kv, config)
    if problems:
        raise GGUFLoadError(f"{gguf_file.name}: " + "; ".join(problems))
    folder, name, how = gguf_file.parent, gguf_file.name, "transformers (gguf_file)"
    try:
        with plain_reader_for_transformers():
            try:
                return _transformers(folder, name, device, dtype, config), how
            except NotImplementedError:  # names the tensors by the config's model_type; the converter wrote Mistral
                return _transformers(folder, name, device, dtype), how  # as llama
    except (ValueError, RuntimeError) as e:
        if "not supported" not in str(e) and "mismatched" not in str(e):
            raise
        why = "architecture not supported" if "not supported" in str(e) else "its config does not fit the weights"
    return load_by_name(gguf_file, merged_dir, device, dtype, kv), f"gguf-py by tensor name (transformers: {why})"


# GGUF hyper-parameter (after "<arch>.") -> the merged config's attribute
HPARAMS = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
           "feed_forward_length": "intermediate_size", "attention.head_count": "num_attention_heads",
           "attention.head_count_kv": "num_key_value_heads", "attention.key_length": "head_dim",
           "context_length": "max_position_embeddings", "rope.freq_base": "rope_theta",
           "attention.layer_norm_rms_epsilon": "rms_norm_eps", "attention.layer_norm_epsilon": "layer_norm_eps"}


@functools.cache
def _plain_reader_class():
    import numpy as np
    from gguf import GGUFReader, GGUFValueType

    class PlainReader(GGUFReader):
        """gguf-py's reader over a plain numpy view of the file's memory map (no copy). np.memmap is a subclass
        whose every slice runs Python-level hooks, and the reader slices once per token, score and merge of the
        vocabulary (a million slices for Llama 3): a plain view reads it in about a third of the time. Arrays of
        strings or scalars (the vocabulary) are split into the same parts with one slice per part, not four."""

        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):
            self._plain = value.view(np.ndarray) if isinstance(value, np.memmap) else value

        def _get_field_parts(self, orig_offs, raw_type):
            item = int(self._plain[orig_offs:orig_offs + 4].view("<u4")[0]) if raw_type == GGUFValueType.ARRAY else -1
            scalar = self.gguf_scalar_to_np.get(GGUFValueType(item)) if item >= 0 else None
            if self.byte_order != "I" or sys.byteorder != "little" or scalar is None and item != GGUFValueType.STRING:
                return super()._get_field_parts(orig_offs, raw_type)  # not an array, nested arrays, another byte order
            head, count = self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)
            parts, start = [head, count], orig_offs + 12
            if item == GGUFValueType.STRING:
                end = _string_parts(self._plain, start, int(count[0]), parts)
            else:
                end = start + int(count[0]) * np.dtype(scalar).itemsize
                parts += list(self._plain[start:end].view(scalar).reshape(-1, 1))  # a 1-element view per value
            idxs = list(range(3, len(parts), 2)) if item == GGUFValueType.STRING else list(range(2, len(parts)))
            types = [GGUFValueType.ARRAY] + ([GGUFValueType(item)] if int(count[0]) else [])
            return end - orig_offs, parts, idxs, types

    return PlainReader


def _string_parts(data, offs: int, count: int, parts: list) -> int:
    """Append each string's length (a 1-element uint64 view) and bytes (a uint8 view) to `parts`, as gguf-py's reader
    does; the offset after the last string."""
    raw = memoryview(data)
    for _ in range(count):
        n = int.from_bytes(raw[offs:offs + 8], "little")
        parts += (data[offs:offs + 8].view("<u8"), data[offs + 8:offs + 8 + n])
        offs += 8 + n
    return offs


def reader(path: str | Path):
    """The GGUF parsed by gguf-py (its fields and tensors), read through a plain view of its memory map."""
    return _plain_reader_class()(str(path))


@contextlib.contextmanager
def plain_reader_for_transformers():
    """transformers imports gguf-py's GGUFReader at its call: for the call's duration it gets the plain-view reader."""
    import gguf

    saved, gguf.GGUFReader = gguf.GGUFReader, _plain_reader_class()
    try:
        yield
    finally:
        gguf.GGUFReader = saved


def hparam_problems(kv: dict, config) -> list[str]:
    """The GGUF's hyper-parameters that differ from the merged config (where both have one)."""
    import math

    arch = kv["general.architecture"]
    rope = getattr(config, "rope_parameters", None) or {}
    problems = []
    for key, attr in HPARAMS.items():
        ours = rope.get(attr) if attr == "rope_theta" and rope else getattr(config, attr, None)
        theirs = kv.get(f"{arch}.{key}")
        if ours is not None and theirs is not None and not math.isclose(float(ours), float(theirs), rel_tol=1e-5):
            problems.append(f"{arch}.{key} is {theirs}, the merged config's {attr} is {ours}")
    return problems


def _gptneox_qkv(name: str, w, config):
    """Undo the converter's GPT-NeoX query_key_value reordering (per head q,k,v -> all q, all k, all v)."""
    import torch

    if "attention.query_key_value" not in name:
        return w
    heads, embed = config.num_attention_heads, config.hidden_size
    q, k, v = (part.reshape(heads, embed // heads, *w.shape[1:]) for part in w.chunk(3, dim=0))
    return torch.stack((q, k, v), dim=1).reshape(w.shape)


UNDO = {"gptneox": _gptneox_qkv}  # per GGUF architecture: the converter's tensor rewrites, reversed


def load_by_name(gguf_file: str | Path, merged_dir: str | Path, device: str = "cpu", dtype=None, kv: dict | None = None):
    """The merged model's architecture with every weight taken from the GGUF (dequantized) through gguf-py's
    tensor-name map; a missing tensor or a hyper-parameter that differs raises GGUFLoadError."""
    import torch
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map
    from gguf.quants import dequantize

    dtype = dtype or compute_dtype(merged_dir, device)
    model = _transformers(Path(merged_dir), None, "cpu", dtype)  # the skeleton: every tensor below is replaced
    problems = hparam_problems(kv if kv is not None else read_kv(gguf_file), model.config)
    if problems:
        raise GGUFLoadError(f"{Path(gguf_file).name}: " + "; ".join(problems))
    parsed = reader(gguf_file)
    arch_name = parsed.fields["general.architecture"].contents()
    names = get_tensor_name_map(next(a for a, n in MODEL_ARCH_NAMES.items() if n == arch_name),
                                model.config.num_hidden_layers)
    tensors = {t.name: t for t in parsed.tensors}
    tied = model.get_output_embeddings().weight if model.config.tie_word_embeddings else None
    state = {}
    for hf_name, param in model.state_dict().items():
        if tied is not None and hf_name.startswith("lm_head") and param.data_ptr() == tied.data_ptr():
            continue  # tied to the input embeddings, which the GGUF holds once (token_embd)
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name not in tensors:
            raise GGUFLoadError(f"{Path(gguf_file).name} has no tensor for {hf_name} (looked for {gguf_name})")
        t = tensors[gguf_name]
        w = torch.from_numpy(dequantize(t.data, t.tensor_type).copy()).to(dtype).reshape(param.shape)
        state[hf_name] = UNDO.get(arch_name, lambda n, x, c: x)(hf_name, w, model.config)
    model.load_state_dict(state, strict=tied is None)
    return model.to(device).eval()
