#!/usr/bin/env python3
"""A minimal OpenAI-compatible inference server over PyTorch, for `make gpu-check`.

`arena gpu-check` runs the arena's runner against a real engine on a real GPU.
Where neither vLLM nor SGLang is installed it runs this server instead: the
example campaign's BF16 checkpoint (a two-layer Qwen3, domain/examples) served
over the machine's own PyTorch, with the tokenizer and a start-up self-check
from transformers. It is an acceptance tool, not an engine for the arena.

What it does, as an engine does it:

- It loads the checkpoint's safetensors onto the GPU, then reserves a KV cache
  pool up front (torch.zeros, in blocks of 16 tokens) and serves requests from
  it with continuous batching: a request is admitted when the pool holds
  blocks for its prompt and its max_tokens and a sequence slot is free, its
  prompt is prefilled alone, and every running request decodes one token per
  step in one batch (attention gathers each sequence's K and V from its
  blocks). A request that waits for blocks is what an engine under a too-small
  budget does.
- It prints its start-up in vLLM's wording, which the runner parses
  (services/runner/job/startup.go ParseStartup), with its own figures: the
  weights are torch.cuda.memory_allocated after loading, the KV lines describe
  the pool it really reserved.
- --gpu-memory-gib X caps the process with
  torch.cuda.set_per_process_memory_fraction(X / total): the caching allocator
  then raises torch.OutOfMemoryError ("CUDA out of memory") past X. Under a cap
  the pool is what X leaves after the weights and a profiling pass (the
  largest prefill and the largest decode step), as vLLM sizes its pool from
  --gpu-memory-utilization; --kv-cache-bytes sets the pool outright. The CUDA
  context and cuBLAS's workspace are not torch allocations and are outside
  the cap.

Why its own model code rather than transformers' generate: the checkpoint's
config.json matches its tensors (Qwen3ForCausalLM: hidden 256, 4 heads over 2
KV heads of 64, 2 layers, vocabulary 2048), so AutoModelForCausalLM loads it
(transformers 4.51 or later), but transformers' cache has no per-request
lengths for continuous batching, and a load generator at concurrency 32 or 64
must see its requests held at once. So the server reads the tensors itself
and runs the decoder as transformers' modeling_qwen3 computes it (RMSNorm on
q and k per head, rotary embedding by halves, grouped-query attention,
SwiGLU), and at start-up checks its logits against
AutoModelForCausalLM's on the same prompt, in float32 on the CPU; a mismatch
ends the start. Without transformers it says so, tokenizes by bytes and
skips the check.

Endpoints: GET /health (200 once loaded: the server listens only then),
GET /v1/models, POST /v1/completions and /v1/chat/completions (stream or not;
with `stream: true` one server-sent event per token, `stream_options:
{include_usage: true}` adds a last event with the usage; `ignore_eos`,
`max_tokens`, `temperature`), and GET /v1/gpucheck/torch: torch's own count
of its memory (memory_allocated and memory_reserved now, their max_ since
serving began and startup_max_ during the start-up's profiling pass), the
weights, the pool and the cap.

Lines it prints for information start with "INFO:", which the runner's
failure classifier passes over; a failure is Python's traceback.
"""

import argparse
import collections
import glob
import json
import math
import os
import queue
import socket
import struct
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import torch.nn.functional as F

GIB = 1 << 30
BLOCK = 16  # tokens per block of the KV cache pool


def info(msg):
    print("INFO: " + msg, flush=True)


# ---------------------------------------------------------------- checkpoint

_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}


def read_safetensors(path):
    """Reads one safetensors file (8-byte header length, JSON header, data)
    into CPU tensors. Only the float types of an unquantized checkpoint."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(meta["dtype"])
        if dtype is None:
            raise ValueError("invalid checkpoint: tensor %s is %s; this server serves BF16, F16 or F32 tensors only"
                             % (name, meta["dtype"]))
        start, end = meta["data_offsets"]
        buf = bytearray(data[start:end])
        t = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(meta["shape"])
    return out


def read_checkpoint(folder):
    cfg_path = os.path.join(folder, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    if cfg.get("quantization_config"):
        raise ValueError("invalid checkpoint for this server: config.json has a quantization_config (%s); "
                         "it serves unquantized checkpoints only" % cfg["quantization_config"].get("quant_method"))
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        raise ValueError("invalid checkpoint: no *.safetensors in %s" % folder)
    tensors = {}
    for p in files:
        tensors.update(read_safetensors(p))
    return cfg, tensors


def eos_ids(folder, cfg):
    ids = set()
    for src in (cfg, _json_or_empty(os.path.join(folder, "generation_config.json"))):
        e = src.get("eos_token_id")
        if isinstance(e, int):
            ids.add(e)
        elif isinstance(e, list):
            ids.update(i for i in e if isinstance(i, int))
    return ids


def _json_or_empty(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------- model

def rms_norm(x, w, eps):
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * x.to(dtype)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def attend(q, k, v, mask=None, causal=False):
    """q [B,H,Tq,D], k and v [B,H,Tk,D]; mask [B,1,Tq or 1,Tk] of bools."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    s = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal:
        tq, tk = q.shape[-2], k.shape[-2]
        s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.matmul(s.float().softmax(-1).to(q.dtype), v)


class Qwen3:
    """The Qwen3 decoder (transformers' modeling_qwen3) over a checkpoint's
    tensors, for a prefill of one sequence or a decode step of a batch."""

    def __init__(self, cfg, tensors, device, dtype):
        self.layers = cfg["num_hidden_layers"]
        self.hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.device, self.dtype = device, dtype
        theta = float(cfg.get("rope_theta", 10000.0))
        if cfg.get("rope_scaling"):
            raise ValueError("invalid checkpoint for this server: rope_scaling %s is not implemented" % cfg["rope_scaling"])
        h, d, kvd = self.hidden, self.head_dim, self.kv_heads * self.head_dim
        want = {"model.embed_tokens.weight": (self.vocab, h), "model.norm.weight": (h,)}
        for i in range(self.layers):
            p = "model.layers.%d." % i
            want.update({
                p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (self.heads * d, h), p + "self_attn.k_proj.weight": (kvd, h),
                p + "self_attn.v_proj.weight": (kvd, h), p + "self_attn.o_proj.weight": (h, self.heads * d),
                p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,),
                p + "mlp.gate_proj.weight": (cfg["intermediate_size"], h),
                p + "mlp.up_proj.weight": (cfg["intermediate_size"], h),
                p + "mlp.down_proj.weight": (h, cfg["intermediate_size"]),
            })
        if not cfg.get("tie_word_embeddings", False) or "lm_head.weight" in tensors:
            want["lm_head.weight"] = (self.vocab, h)
        for name, shape in want.items():
            if name not in tensors:
                raise ValueError("invalid checkpoint: %s is missing" % name)
            if tuple(tensors[name].shape) != shape:
                raise ValueError("invalid checkpoint: %s is %s, config.json makes it %s"
                                 % (name, list(tensors[name].shape), list(shape)))
        extra = sorted(set(tensors) - set(want))
        if extra:
            raise ValueError("invalid checkpoint: tensors the Qwen3 model does not have: %s" % ", ".join(extra[:5]))
        w = {name: tensors[name].to(device=device, dtype=dtype) for name in want}
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed)
        self.w = [{k[len("model.layers.%d." % i):]: v for k, v in w.items() if k.startswith("model.layers.%d." % i)}
                  for i in range(self.layers)]
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / d))

    def kv_bytes_per_token(self):
        return self.layers * 2 * self.kv_heads * self.head_dim * torch.tensor([], dtype=self.dtype).element_size()

    def rope(self, positions):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    def _qkv(self, lw, x, cos, sin):
        b, t, _ = x.shape
        h = rms_norm(x, lw["input_layernorm.weight"], self.eps)
        q = F.linear(h, lw["self_attn.q_proj.weight"]).view(b, t, self.heads, self.head_dim)
        k = F.linear(h, lw["self_attn.k_proj.weight"]).view(b, t, self.kv_heads, self.head_dim)
        v = F.linear(h, lw["self_attn.v_proj.weight"]).view(b, t, self.kv_heads, self.head_dim)
        q = rms_norm(q, lw["self_attn.q_norm.weight"], self.eps).transpose(1, 2)
        k = rms_norm(k, lw["self_attn.k_norm.weight"], self.eps).transpose(1, 2)
        return rotate(q, cos, sin), rotate(k, cos, sin), v.transpose(1, 2)

    def _expand(self, kv):
        b, g, t, d = kv.shape
        rep = self.heads // g
        if rep == 1:
            return kv
        return kv[:, :, None].expand(b, g, rep, t, d).reshape(b, g * rep, t, d)

    def _out(self, lw, x, a):
        b, _, t, _ = a.shape
        x = x + F.linear(a.transpose(1, 2).reshape(b, t, self.heads * self.head_dim), lw["self_attn.o_proj.weight"])
        h = rms_norm(x, lw["post_attention_layernorm.weight"], self.eps)
        m = F.silu(F.linear(h, lw["mlp.gate_proj.weight"])) * F.linear(h, lw["mlp.up_proj.weight"])
        return x + F.linear(m, lw["mlp.down_proj.weight"])

    def prefill(self, ids, pool=None, slots=None, all_logits=False):
        """One sequence's prompt: writes its K and V into the pool at slots
        (when given) and returns the last position's logits (every
        position's with all_logits), in float32."""
        t = ids.shape[0]
        x = self.embed[ids][None]
        cos, sin = self.rope(torch.arange(t, device=self.device))
        cos, sin = cos[None, None], sin[None, None]
        for i, lw in enumerate(self.w):
            q, k, v = self._qkv(lw, x, cos, sin)
            if pool is not None:
                pool.k[i][slots] = k[0].transpose(0, 1)
                pool.v[i][slots] = v[0].transpose(0, 1)
            x = self._out(lw, x, attend(q, self._expand(k), self._expand(v), causal=True))
        x = x[0] if all_logits else x[0, -1:]
        return F.linear(rms_norm(x, self.norm, self.eps), self.lm_head).float()

    def decode(self, tokens, positions, new_slots, gather, mask, pool):
        """One step of a batch: tokens [B] at positions [B], their K and V
        written at new_slots [B]; each sequence attends to the pool slots
        gather [B, L] where mask [B, L] holds. Returns logits [B, vocab]."""
        x = self.embed[tokens][:, None]
        cos, sin = self.rope(positions)
        cos, sin = cos[:, None, None, :], sin[:, None, None, :]
        m = mask[:, None, None, :]
        for i, lw in enumerate(self.w):
            q, k, v = self._qkv(lw, x, cos, sin)
            pool.k[i][new_slots] = k[:, :, 0]
            pool.v[i][new_slots] = v[:, :, 0]
            keys = pool.k[i][gather].permute(0, 2, 1, 3)
            values = pool.v[i][gather].permute(0, 2, 1, 3)
            x = self._out(lw, x, attend(q, self._expand(keys), self._expand(values), mask=m))
        return F.linear(rms_norm(x[:, 0], self.norm, self.eps), self.lm_head).float()


class KVPool:
    """The KV cache pool: per layer one K and one V tensor of tokens x KV
    heads x head width, reserved at start-up, handed out in blocks."""

    def __init__(self, model, tokens):
        self.blocks = tokens // BLOCK
        self.tokens = self.blocks * BLOCK
        shape = (self.tokens, model.kv_heads, model.head_dim)
        self.k = [torch.zeros(shape, dtype=model.dtype, device=model.device) for _ in range(model.layers)]
        self.v = [torch.zeros(shape, dtype=model.dtype, device=model.device) for _ in range(model.layers)]
        self.bytes = sum(t.numel() * t.element_size() for t in self.k + self.v)
        self.free = list(range(self.blocks))

    def alloc(self, n):
        if n > len(self.free):
            return None
        out, self.free = self.free[:n], self.free[n:]
        return out

    def release(self, blocks):
        self.free.extend(blocks)

    def used_tokens(self):
        return (self.blocks - len(self.free)) * BLOCK


# ----------------------------------------------------------------- tokenizer

class ByteTokenizer:
    """Without transformers: one token per UTF-8 byte, the byte-level
    vocabulary's first 256 ids (the example tokenizer's base, without its
    merges)."""

    def encode(self, text):
        return list(text.encode("utf-8"))

    def piece(self, tid):
        if tid < 256:
            return bytes([tid]).decode("utf-8", errors="replace")
        return ""

    def chat(self, messages):
        return "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m.get("role", "user"), content_text(m.get("content")))
                       for m in messages) + "<|im_start|>assistant\n"


class HFTokenizer:
    def __init__(self, folder):
        from transformers import AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(folder)

    def encode(self, text):
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def piece(self, tid):
        return self.tok.decode([tid], skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def chat(self, messages):
        if getattr(self.tok, "chat_template", None):
            return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return ByteTokenizer().chat(messages)


def content_text(c):
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return c or ""


def token_text(tok, tid):
    """The text streamed for one token. The example model has random
    weights and a vocabulary of 2,048 ids of which its tokenizer names
    fewer; an id the tokenizer has no text for, or half of a character cut
    between two tokens, streams as <|id|>, so that every token is one
    non-empty event, as the load generator counts them."""
    try:
        s = tok.piece(tid)
    except Exception:  # an id beyond the tokenizer's vocabulary, in some versions
        s = ""
    if not s or "\ufffd" in s:
        return "<|%d|>" % tid
    return s


# --------------------------------------------------------------- scheduling

class Request:
    def __init__(self, rid, ids, max_tokens, ignore_eos, temperature):
        self.id, self.ids, self.max_tokens = rid, ids, max_tokens
        self.ignore_eos, self.temperature = ignore_eos, temperature
        self.out = queue.Queue()
        self.blocks, self.row, self.length, self.last, self.generated = None, None, 0, None, 0
        self.cancelled = False


class Engine:
    """Continuous batching over the pool: one thread admits, prefills and
    decodes; each request's handler reads its tokens from its queue."""

    def __init__(self, model, pool, tok, eos, max_num_seqs, max_model_len):
        self.model, self.pool, self.tok, self.eos = model, pool, tok, eos
        self.max_num_seqs, self.max_model_len = max_num_seqs, max_model_len
        self.cond = threading.Condition()
        self.waiting = collections.deque()
        self.running = []
        self.rows = list(range(max_num_seqs))
        # Each running sequence's pool slot of each of its positions.
        self.slot_table = torch.zeros((max_num_seqs, max_model_len), dtype=torch.long, device=model.device)
        self.offsets = torch.arange(BLOCK, device=model.device)
        self.texts = {}

    def text(self, tid):
        s = self.texts.get(tid)
        if s is None:
            s = self.texts[tid] = token_text(self.tok, tid)
        return s

    def submit(self, r):
        with self.cond:
            self.waiting.append(r)
            self.cond.notify()

    def counts(self):
        with self.cond:
            return len(self.running), len(self.waiting)

    def run(self):
        try:
            with torch.no_grad():
                self._loop()
        except BaseException:
            # An engine that fails while serving dies, and its log says why
            # (a CUDA out of memory is classified engine_oom, phase serving).
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)

    def _admit(self):
        admitted = []
        with self.cond:
            while not self.waiting and not self.running:
                self.cond.wait()
            while self.waiting and len(self.running) + len(admitted) < self.max_num_seqs:
                r = self.waiting[0]
                if r.cancelled:
                    self.waiting.popleft()
                    continue
                blocks = self.pool.alloc(-(-(len(r.ids) + r.max_tokens) // BLOCK))
                if blocks is None:
                    break  # it waits until running requests free their blocks
                self.waiting.popleft()
                r.blocks, r.row = blocks, self.rows.pop()
                admitted.append(r)
        return admitted

    def _loop(self):
        m = self.model
        while True:
            for r in self._admit():
                b = torch.tensor(r.blocks, dtype=torch.long, device=m.device)
                slots = (b[:, None] * BLOCK + self.offsets[None, :]).reshape(-1)
                n = min(slots.shape[0], self.max_model_len)
                self.slot_table[r.row, :n] = slots[:n]
                ids = torch.tensor(r.ids, dtype=torch.long, device=m.device)
                logits = m.prefill(ids, self.pool, slots[:len(r.ids)])
                r.length = len(r.ids)
                self._emit(r, self._sample(logits, [r])[0])
            for r in [r for r in self.running if r.cancelled]:
                self._finish(r, None)
            batch = list(self.running)
            if not batch:
                continue
            lens = [r.length + 1 for r in batch]  # each with the token it decodes now
            width = max(lens)
            rows = torch.tensor([r.row for r in batch], dtype=torch.long, device=m.device)
            lengths = torch.tensor(lens, dtype=torch.long, device=m.device)
            positions = lengths - 1
            gather = self.slot_table[rows, :width]
            new_slots = gather.gather(1, positions[:, None])[:, 0]
            mask = torch.arange(width, device=m.device)[None, :] < lengths[:, None]
            tokens = torch.tensor([r.last for r in batch], dtype=torch.long, device=m.device)
            logits = m.decode(tokens, positions, new_slots, gather, mask, self.pool)
            for r, tid in zip(batch, self._sample(logits, batch)):
                r.length += 1
                self._emit(r, tid)

    def _sample(self, logits, reqs):
        if all(r.temperature <= 0 for r in reqs):
            return logits.argmax(-1).tolist()
        out = []
        for row, r in zip(logits, reqs):
            if r.temperature <= 0:
                out.append(int(row.argmax()))
            else:
                out.append(int(torch.multinomial((row / r.temperature).softmax(-1), 1)))
        return out

    def _emit(self, r, tid):
        """Hands a request its next token, or ends it."""
        if not r.ignore_eos and tid in self.eos:
            self._finish(r, "stop")
            return
        r.generated += 1
        r.last = tid
        done = r.generated >= r.max_tokens
        r.out.put(("token", self.text(tid), "length" if done else None))
        if done:
            self._finish(r, "length")
        elif r not in self.running:
            self.running.append(r)

    def _finish(self, r, reason):
        if r in self.running:
            self.running.remove(r)
        with self.cond:
            self.pool.release(r.blocks)
            self.rows.append(r.row)
            r.blocks = []
        r.out.put(("end", reason, None))


# --------------------------------------------------------------------- HTTP

class Server:
    def __init__(self, args, model, pool, engine, tok, weights_bytes, cap_bytes, total_bytes, startup_peak):
        self.args, self.model, self.pool, self.engine, self.tok = args, model, pool, engine, tok
        self.startup_peak = startup_peak
        self.weights_bytes, self.cap_bytes, self.total_bytes = weights_bytes, cap_bytes, total_bytes
        self.name = args.served_model_name or args.model
        self.created = int(time.time())
        self.lock = threading.Lock()
        self.next_id = 0

    def new_id(self):
        with self.lock:
            self.next_id += 1
            return self.next_id

    def torch_report(self):
        cuda = self.model.device.type == "cuda"
        dev = self.model.device
        running, waiting = self.engine.counts()
        return {
            "device": str(dev),
            "name": torch.cuda.get_device_name(dev) if cuda else "cpu",
            "total_bytes": self.total_bytes,
            "cap_bytes": self.cap_bytes,
            "allocated_bytes": torch.cuda.memory_allocated(dev) if cuda else 0,
            "max_allocated_bytes": torch.cuda.max_memory_allocated(dev) if cuda else 0,
            "reserved_bytes": torch.cuda.memory_reserved(dev) if cuda else 0,
            "max_reserved_bytes": torch.cuda.max_memory_reserved(dev) if cuda else 0,
            "startup_max_allocated_bytes": self.startup_peak[0],
            "startup_max_reserved_bytes": self.startup_peak[1],
            "weights_bytes": self.weights_bytes,
            "kv_pool_bytes": self.pool.bytes,
            "kv_pool_tokens": self.pool.tokens,
            "kv_used_tokens": self.pool.used_tokens(),
            "running": running,
            "waiting": waiting,
        }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpucheck"
    app = None  # the Server

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        pass  # no access log: the runner keeps the log's last lines for the start-up and failures

    def _json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code, msg):
        self._json(code, {"object": "error", "message": msg, "type": "BadRequestError", "code": code})

    def do_GET(self):
        app = self.app
        if self.path == "/health":
            self._json(200, {})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": app.name, "object": "model", "created": app.created,
                                                         "owned_by": "gpucheck", "root": app.args.model,
                                                         "max_model_len": app.engine.max_model_len}]})
        elif self.path == "/v1/gpucheck/torch":
            self._json(200, app.torch_report())
        else:
            self._error(404, "not found: " + self.path)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            self._error(400, "the body is not JSON")
            return
        if self.path == "/v1/completions":
            self._generate(body, chat=False)
        elif self.path == "/v1/chat/completions":
            self._generate(body, chat=True)
        else:
            self._error(404, "not found: " + self.path)

    def _generate(self, body, chat):
        app = self.app
        if chat:
            prompt = app.tok.chat(body.get("messages") or [])
        else:
            prompt = body.get("prompt", "")
            if isinstance(prompt, list):
                if len(prompt) != 1 or not isinstance(prompt[0], str):
                    self._error(400, "prompt: one string only")
                    return
                prompt = prompt[0]
        ids = app.tok.encode(prompt)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        if not ids:
            self._error(400, "the prompt is empty")
            return
        if len(ids) + max_tokens > app.engine.max_model_len:
            self._error(400, "This model's maximum context length is %d tokens. However, you requested %d tokens "
                             "(%d in the messages, %d in the completion)."
                        % (app.engine.max_model_len, len(ids) + max_tokens, len(ids), max_tokens))
            return
        if -(-(len(ids) + max_tokens) // BLOCK) > app.pool.blocks:
            self._error(400, "the request needs %d tokens of KV cache, the pool holds %d"
                        % (len(ids) + max_tokens, app.pool.tokens))
            return
        temperature = body.get("temperature")
        r = Request(app.new_id(), ids, int(max_tokens), bool(body.get("ignore_eos", False)),
                    1.0 if temperature is None else float(temperature))
        app.engine.submit(r)
        try:
            if body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                self._stream(r, chat, usage)
            else:
                self._whole(r, chat)
        except (BrokenPipeError, ConnectionResetError):
            r.cancelled = True
            self.close_connection = True

    def _events(self, r):
        while True:
            kind, a, b = r.out.get()
            if kind == "end":
                yield None, a
                return
            yield a, b

    def _chunk(self, obj):
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _stream(self, r, chat, include_usage):
        app = self.app
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        rid = ("chatcmpl-%d" if chat else "cmpl-%d") % r.id
        obj = "chat.completion.chunk" if chat else "text_completion"
        created = int(time.time())

        def event(text, finish):
            if chat:
                choice = {"index": 0, "delta": {"content": text} if text is not None else {}, "logprobs": None,
                          "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            return {"id": rid, "object": obj, "created": created, "model": app.name, "choices": [choice]}

        if chat:
            first = event("", None)
            first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            self._chunk(first)
        count = 0
        for text, reason in self._events(r):
            if text is None:
                if reason == "stop":
                    self._chunk(event(None if chat else "", "stop"))
                break
            count += 1
            self._chunk(event(text, reason))
        if include_usage:
            self._chunk({"id": rid, "object": obj, "created": created, "model": app.name, "choices": [],
                         "usage": {"prompt_tokens": len(r.ids), "completion_tokens": count,
                                   "total_tokens": len(r.ids) + count}})
        self._chunk(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    def _whole(self, r, chat):
        app = self.app
        texts, finish = [], None
        for text, reason in self._events(r):
            if text is None:
                finish = finish or reason
                break
            texts.append(text)
            finish = reason or finish
        content = "".join(texts)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": content, "logprobs": None, "finish_reason": finish}
        self._json(200, {"id": ("chatcmpl-%d" if chat else "cmpl-%d") % r.id,
                         "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                         "model": app.name, "choices": [choice],
                         "usage": {"prompt_tokens": len(r.ids), "completion_tokens": len(texts),
                                   "total_tokens": len(r.ids) + len(texts)}})


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a workload opens its connections all at once


# ------------------------------------------------------------------ start-up

def load_model(args, cfg, tensors, device, dtype):
    """Puts the weights on the device (where a too-small cap runs out of
    memory: weights_loading)."""
    return Qwen3(cfg, tensors, device, dtype)


def self_check(args, cfg, tensors, tok):
    """The server's decoder against transformers' on one prompt, both in
    float32 on the CPU."""
    try:
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError:
        info("self-check skipped: transformers is not installed")
        return
    try:
        hf = AutoModelForCausalLM.from_pretrained(args.model).float().eval()
    except Exception as e:  # an older transformers without Qwen3, say
        info("self-check skipped: transformers %s does not load the checkpoint (%s)"
             % (transformers.__version__, str(e).splitlines()[0] if str(e) else type(e).__name__))
        return
    ids = tok.encode("The access code for the vault of Orion is 4242. What is the access code?")[:48]
    ids_t = torch.tensor(ids, dtype=torch.long)
    with torch.no_grad():
        ref = hf(input_ids=ids_t[None]).logits[0].float()
        ours = Qwen3(cfg, tensors, torch.device("cpu"), torch.float32).prefill(ids_t, all_logits=True)
    diff = float((ref - ours).abs().max())
    scale = float(ref.abs().max())
    if not diff <= 1e-3 * max(1.0, scale):
        raise SystemExit("self-check failed: the server's logits differ from transformers' %s by up to %.3g "
                         "(largest logit %.3g) on a %d-token prompt" % (transformers.__version__, diff, scale, len(ids)))
    info("self-check: logits match transformers %s's AutoModelForCausalLM within %.2g on a %d-token prompt "
         "(largest logit %.3g)" % (transformers.__version__, diff, len(ids), scale))
    del hf


def profile(model, max_num_seqs, max_model_len):
    """The activations of the largest prefill (max_model_len tokens) and the
    largest decode step (max_num_seqs sequences of max_model_len), against
    a pool of one block (the gathers are as large as on the real pool)."""
    class Dummy:
        pass
    d = Dummy()
    shape = (BLOCK, model.kv_heads, model.head_dim)
    d.k = [torch.zeros(shape, dtype=model.dtype, device=model.device) for _ in range(model.layers)]
    d.v = [torch.zeros(shape, dtype=model.dtype, device=model.device) for _ in range(model.layers)]
    dev = model.device
    with torch.no_grad():
        model.prefill(torch.zeros(max_model_len, dtype=torch.long, device=dev), d,
                      torch.zeros(max_model_len, dtype=torch.long, device=dev))
        b = max_num_seqs
        model.decode(torch.zeros(b, dtype=torch.long, device=dev), torch.full((b,), max_model_len - 1, dtype=torch.long, device=dev),
                     torch.zeros(b, dtype=torch.long, device=dev), torch.zeros((b, max_model_len), dtype=torch.long,
                                                                                device=dev),
                     torch.ones((b, max_model_len), dtype=torch.bool, device=dev), d)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def initialize_kv_cache(args, model, cap_bytes, max_num_seqs, max_model_len):
    """Reserves the KV cache pool: --kv-cache-bytes; else under a cap what
    the cap leaves after the weights and the profiled activations; else
    room for max_num_seqs sequences of max_model_len."""
    bpt = model.kv_bytes_per_token()
    cuda = model.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(model.device)
    t0 = time.time()
    profile(model, max_num_seqs, max_model_len)
    if cuda:
        peak_reserved = torch.cuda.max_memory_reserved(model.device)
        info("profiling: the largest prefill and decode step took torch to %.4f GiB allocated, %.4f GiB reserved "
             "(%.2f s)" % (torch.cuda.max_memory_allocated(model.device) / GIB, peak_reserved / GIB, time.time() - t0))
        torch.cuda.empty_cache()
    if args.kv_cache_bytes:
        tokens = args.kv_cache_bytes // bpt
        how = "--kv-cache-bytes %d" % args.kv_cache_bytes
    elif cap_bytes is not None and cuda:
        # Room above the profiled peak for the allocator's rounding: a
        # pool tensor is its own segment, rounded up to 2 MiB.
        room = cap_bytes - peak_reserved - 2 * model.layers * (2 << 20)
        tokens = max(0, room) // bpt
        how = "the cap of %.4f GiB less the profiled peak of %.4f GiB" % (cap_bytes / GIB, peak_reserved / GIB)
    else:
        tokens = max_num_seqs * max_model_len
        how = "--max-num-seqs %d x --max-model-len %d" % (max_num_seqs, max_model_len)
    if tokens < max_model_len:
        raise RuntimeError("out of memory for the KV cache pool: %s leaves %d tokens of KV cache (%d bytes a token), "
                           "fewer than one request of --max-model-len %d" % (how, tokens, bpt, max_model_len))
    pool = KVPool(model, tokens)
    if cuda:
        torch.cuda.synchronize(model.device)
    info("KV cache pool: %d blocks of %d tokens reserved at start-up (torch.zeros), %d bytes a token, sized by %s"
         % (pool.blocks, BLOCK, bpt, how))
    return pool


def parse_args(argv):
    p = argparse.ArgumentParser(description="A minimal OpenAI-compatible server over PyTorch for make gpu-check.")
    p.add_argument("--model", required=True, help="the checkpoint folder (config.json, *.safetensors, tokenizer)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default="", help="the id /v1/models gives (default: --model)")
    p.add_argument("--device", default="cuda", help="cuda (the default: CUDA device 0) or cpu, for a dry run")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "bf16", "bfloat16"],
                   help="the pool is in the model's dtype; others are refused")
    p.add_argument("--max-num-seqs", type=int, default=256, help="sequences decoded at once")
    p.add_argument("--max-model-len", type=int, default=0,
                   help="tokens a request may hold, prompt and output (default: max_position_embeddings)")
    p.add_argument("--gpu-memory-gib", type=float, default=0.0,
                   help="cap what torch may allocate (torch.cuda.set_per_process_memory_fraction(X / total))")
    p.add_argument("--kv-cache-bytes", type=int, default=0, help="the KV cache pool's size in bytes")
    p.add_argument("--no-self-check", action="store_true", help="skip the start-up check against transformers")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    t_start = time.time()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    total_bytes, cap_bytes = 0, None
    info("gpucheck server: torch %s, python %s, device %s, dtype %s, kv_cache_dtype=%s, max_num_seqs=%d"
         % (torch.__version__, sys.version.split()[0], args.device, args.dtype, args.kv_cache_dtype, args.max_num_seqs))
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available to torch %s (no GPU, or a CPU build)" % torch.__version__)
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        torch.cuda.init()
        total_bytes = torch.cuda.get_device_properties(device).total_memory
        info("GPU %s: %.2f GiB" % (torch.cuda.get_device_name(device), total_bytes / GIB))
        if args.gpu_memory_gib > 0:
            cap_bytes = int(args.gpu_memory_gib * GIB)
            fraction = min(1.0, cap_bytes / total_bytes)
            torch.cuda.set_per_process_memory_fraction(fraction, device)
            info("torch may allocate %.4f GiB (--gpu-memory-gib): set_per_process_memory_fraction(%.6g)"
                 % (args.gpu_memory_gib, fraction))
    elif args.gpu_memory_gib > 0:
        info("--gpu-memory-gib %g ignored: the cap is torch's CUDA allocator's, and this run is on %s"
             % (args.gpu_memory_gib, args.device))
    t0 = time.time()
    cfg, tensors = read_checkpoint(args.model)
    read_s = time.time() - t0
    max_model_len = args.max_model_len or int(cfg.get("max_position_embeddings") or 4096)
    max_num_seqs = max(1, args.max_num_seqs)
    try:
        tok = HFTokenizer(args.model)
    except ImportError:
        info("transformers is not installed: tokenizing by UTF-8 bytes")
        tok = ByteTokenizer()
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    t0 = time.time()
    with torch.no_grad():
        model = load_model(args, cfg, tensors, device, dtype)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        weights_bytes = torch.cuda.memory_allocated(device) - before
    else:
        weights_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
    load_s = time.time() - t0
    # vLLM's wording (gpu_model_runner.py), which the runner reads.
    info("Model loading took %.4f GiB memory and %.6f seconds" % (weights_bytes / GIB, read_s + load_s))
    info("Loading weights took %.2f seconds" % read_s)
    if not args.no_self_check:
        self_check(args, cfg, tensors, tok)
    del tensors
    pool = initialize_kv_cache(args, model, cap_bytes, max_num_seqs, max_model_len)
    startup_peak = (0, 0)
    if device.type == "cuda":
        # The report's max_* are the serving's; the start-up's (the
        # profiling pass, released before the pool) are kept apart.
        startup_peak = (torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device))
        torch.cuda.reset_peak_memory_stats(device)
    # vLLM's wording (gpu_worker.py, kv_cache_utils.py): the pool above.
    info("Available KV cache memory: %.4f GiB" % (pool.bytes / GIB))
    info("GPU KV cache size: {:,} tokens".format(pool.tokens))
    info("Maximum concurrency for {:,} tokens per request: {:.2f}x".format(max_model_len, pool.tokens / max_model_len))
    engine = Engine(model, pool, tok, eos_ids(args.model, cfg), max_num_seqs, max_model_len)
    app = Server(args, model, pool, engine, tok, weights_bytes, cap_bytes, total_bytes, startup_peak)
    Handler.app = app
    httpd = HTTPServer((args.host, args.port), Handler)
    threading.Thread(target=engine.run, name="engine", daemon=True).start()
    info("serving %s on http://%s:%d (started in %.2f s)" % (app.name, args.host, args.port, time.time() - t_start))
    with torch.no_grad():
        httpd.serve_forever()


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
