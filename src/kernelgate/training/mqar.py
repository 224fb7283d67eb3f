"""Multi-query associative recall (MQAR) and a small language model per kernel member.

MQAR (Arora et al., "Zoology", 2023; used again for "Based") asks a causal model to read N
key-value pairs and then, at each later occurrence of a key, to predict that key's value. It
is the task on which recurrent token mixers differ most at a fixed state size, and it is
small enough that a model of tens of millions of parameters learns it within minutes, so it
is the test bed of issue 22 item 4: every member (gdn, delta_rule, gla, kda, mamba2) gets the
same model around it, trained with our chunked Triton kernels, and one optimizer step of
each is compared with the same step through the member's naive recurrence.

Everything here is plain PyTorch around the kernels; the only thing that changes between
"ours" and "naive" is the function a :class:`TokenMixer` calls, so the same weights run both
ways (:func:`set_backend`).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

MEMBERS = ("gdn", "delta_rule", "gla", "kda", "mamba2")
BACKENDS = ("ours", "naive")
IGNORE_INDEX = -100  # torch's cross-entropy default: positions that are not queries
FILLER = 0  # the token between queries; never a key or a value


# --------------------------------------------------------------------------------------------
# Data


def mqar_batch(
    vocab_size: int,
    seq_len: int,
    num_kv_pairs: int,
    batch_size: int,
    seed: int,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """One seeded MQAR batch: ``(inputs, targets)``, both int64 [batch_size, seq_len].

    The vocabulary is split in halves: keys are drawn from ``[1, vocab_size // 2)`` (distinct
    within an example, so every query has one answer) and values from
    ``[vocab_size // 2, vocab_size)`` (with repetition, as in Zoology); token 0 is the filler.
    The first ``2 * num_kv_pairs`` tokens are ``k_1 v_1 ... k_N v_N``; every key is then
    queried once, in a random order, at random positions of the rest of the sequence (filler
    elsewhere). ``targets`` holds the paired value at each query position (a causal model
    predicts it from the key it has just read) and ``IGNORE_INDEX`` everywhere else, so the
    pairs section, which is random and unpredictable, does not enter the loss.

    The batch is drawn on the CPU from its own generator and then moved, so a seed gives the
    same batch on every device and does not touch the global RNG.
    """
    num_keys = vocab_size // 2 - 1
    if num_kv_pairs < 1 or num_kv_pairs > num_keys:
        raise ValueError(f"num_kv_pairs must be in [1, {num_keys}] for vocab_size {vocab_size}")
    if 3 * num_kv_pairs > seq_len:
        raise ValueError(
            f"seq_len {seq_len} is too short for {num_kv_pairs} pairs and their queries"
        )
    gen = torch.Generator().manual_seed(seed)
    n, b = num_kv_pairs, batch_size
    keys = torch.rand(b, num_keys, generator=gen).argsort(dim=1)[:, :n] + 1
    values = torch.randint(vocab_size // 2, vocab_size, (b, n), generator=gen)
    inputs = torch.full((b, seq_len), FILLER, dtype=torch.long)
    inputs[:, 0 : 2 * n : 2] = keys
    inputs[:, 1 : 2 * n : 2] = values
    free = seq_len - 2 * n
    positions = torch.rand(b, free, generator=gen).argsort(dim=1)[:, :n].sort(dim=1).values
    positions = positions + 2 * n
    order = torch.rand(b, n, generator=gen).argsort(dim=1)  # which pair each query asks for
    targets = torch.full((b, seq_len), IGNORE_INDEX, dtype=torch.long)
    inputs.scatter_(1, positions, keys.gather(1, order))
    targets.scatter_(1, positions, values.gather(1, order))
    return inputs.to(device), targets.to(device)


# --------------------------------------------------------------------------------------------
# Model


@dataclass(frozen=True)
class MQARConfig:
    """Model, data and optimizer settings shared by every member of one comparison.

    The defaults are the device run's: d_model 512, depth 4, 4 heads of 128 (each member's
    state is 4 x 128 x 128 per layer), vocabulary 8192 as in Zoology, untied head: about 22
    million parameters for the delta-rule members (``count_parameters``). ``tiny()`` is the
    CPU test size. The learning-rate schedule is constant after a linear warm-up by default:
    a time-budgeted run stops at a step it cannot know in advance, and a cosine schedule
    planned for more steps than it gets would compare members at different points of it.
    """

    vocab_size: int = 8192
    seq_len: int = 256
    num_kv_pairs: int = 16
    d_model: int = 512
    depth: int = 4
    heads: int = 4
    head_dim: int = 128
    mlp_ratio: int = 4
    conv_size: int = 4
    tie_embeddings: bool = False
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    adam_eps: float = 1e-8
    warmup_steps: int = 100
    schedule: str = "constant"  # or "cosine" (decays to 10% over the requested steps)
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_examples: int = 512
    amp: bool = True  # bf16 autocast, on CUDA only (the interpreter's bf16 dots are wrong)

    @classmethod
    def tiny(cls, **overrides: Any) -> MQARConfig:
        """A CPU-sized config: one layer's kernels, forward and backward, take about a second
        under the Triton interpreter (which runs every program of the grid in turn, so its
        cost grows with batch x heads)."""
        base = cls(
            vocab_size=64,
            seq_len=32,
            num_kv_pairs=4,
            d_model=32,
            depth=2,
            heads=2,
            head_dim=16,
            batch_size=4,
            lr=3e-3,
            warmup_steps=0,
            eval_every=5,
            eval_examples=16,
        )
        return replace(base, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


def _dt_bias(shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
    """Mamba's step-size bias: softplus(bias) log-uniform in [1e-3, 1e-1], so at init each
    head forgets on its own time scale (tens to a thousand steps) rather than all alike."""
    u = torch.rand(shape, generator=generator)
    dt = torch.exp(u * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    return _inverse_softplus(dt.clamp_min(1e-4))


class ShortConv(nn.Module):
    """Causal depthwise convolution over time (width ``conv_size``) followed by SiLU.

    Every member's reference architecture (Gated DeltaNet, GLA in fla, KDA, Mamba-2, Based)
    puts one before its recurrence, and MQAR needs it: binding value v_i to key k_i needs the
    previous token at v_i's position, which a pure recurrence reads only indirectly. It is
    outside the kernel, so "ours" and "naive" share it exactly."""

    def __init__(self, channels: int, conv_size: int) -> None:
        super().__init__()
        self.conv_size = conv_size
        self.weight = nn.Parameter(torch.empty(channels, 1, conv_size))
        self.bias = nn.Parameter(torch.zeros(channels))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, T, C]
        seq_len = x.shape[1]
        y = F.conv1d(
            x.transpose(1, 2),
            self.weight.to(x.dtype),
            self.bias.to(x.dtype),
            padding=self.conv_size - 1,
            groups=x.shape[-1],
        )
        return F.silu(y[..., :seq_len].transpose(1, 2))


class TokenMixer(nn.Module):
    """One member's recurrent layer: projections to its inputs, its recurrence (our chunked
    kernel or its naive step-by-step oracle, by ``backend``), a per-head output norm, a SiLU
    output gate and the output projection.

    The members share the shape around the recurrence (q/k of ``heads x head_dim``, v of
    ``heads x head_dim``, the short convolution, the gated output), so that a comparison at
    one width and depth differs in the recurrence and its gates only. Per member, following
    each one's reference implementation:

    * gdn: q, k L2-normalised (the delta rule is stable for beta |k|^2 <= 2), beta =
      sigmoid(linear), g = -exp(A_log) * softplus(linear + dt_bias) (Gated DeltaNet's
      Mamba-style decay, one per head and step).
    * delta_rule: q, k L2-normalised, beta = sigmoid(linear); no decay.
    * gla: q, k as they come (GLA has no key norm), g = logsigmoid(low-rank linear) / 16 per
      key channel (the 1/16 of fla's gate_logit_normalizer keeps most channels slow at
      init, which long recall needs).
    * kda: q, k L2-normalised, beta = sigmoid(linear), per-channel g = -exp(A_log) *
      softplus(low-rank linear + dt_bias) (KDA's gate, gdn's per channel).
    * mamba2: x (P = head_dim), B and C (one group per head, N = head_dim, the same state
      size as the others) through the short conv, dt = softplus(linear + dt_bias), A =
      -exp(A_log), D a per-head skip; the output gate plays Mamba-2's z.

    Gates (g, dt, A, D) are formed and handed over in fp32 whatever autocast does (their
    projections still run in autocast's bf16): the kernels take log decays in fp32 and sum
    them in fp64, and a bf16 g would round every step's decay to three significant digits
    before that sum over hundreds of steps. q, k, v (x, B, C) and beta go to the kernel in
    the activation dtype, as the kernel tests exercise them. A float64 model (step_check's)
    hands our kernels fp32 and the naive recurrence float64 throughout.
    """

    def __init__(
        self,
        member: str,
        d_model: int,
        heads: int,
        head_dim: int,
        conv_size: int = 4,
        backend: str = "ours",
        naive_dtype: torch.dtype = torch.float64,
    ) -> None:
        super().__init__()
        if member not in MEMBERS:
            raise ValueError(f"unknown member {member!r}; expected one of {MEMBERS}")
        self.member, self.heads, self.head_dim = member, heads, head_dim
        self.backend, self.naive_dtype = backend, naive_dtype
        width = heads * head_dim
        self.q_proj = nn.Linear(d_model, width, bias=False)  # mamba2: C
        self.k_proj = nn.Linear(d_model, width, bias=False)  # mamba2: B
        self.v_proj = nn.Linear(d_model, width, bias=False)  # mamba2: x
        self.conv = ShortConv(3 * width, conv_size)
        self.gate_proj = nn.Linear(d_model, width, bias=False)
        self.o_norm = nn.RMSNorm(head_dim, eps=1e-6)
        self.o_proj = nn.Linear(width, d_model, bias=False)
        if member in ("gdn", "delta_rule", "kda"):
            self.b_proj = nn.Linear(d_model, heads, bias=True)
        if member in ("gdn", "kda", "mamba2"):
            self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(1, 16)))
        if member in ("gdn", "mamba2"):
            self.a_proj = nn.Linear(d_model, heads, bias=False)
            self.dt_bias = nn.Parameter(_dt_bias((heads,)))
        if member == "gla":
            self.gk_proj = nn.Sequential(
                nn.Linear(d_model, 16, bias=False), nn.Linear(16, width, bias=True)
            )
        if member == "kda":
            self.f_proj = nn.Sequential(
                nn.Linear(d_model, head_dim, bias=False), nn.Linear(head_dim, width, bias=False)
            )
            self.dt_bias = nn.Parameter(_dt_bias((width,)))
        if member == "mamba2":
            self.D = nn.Parameter(torch.ones(heads))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, T, d_model]
        batch, seq_len, _ = x.shape
        h, d = self.heads, self.head_dim
        qkv = self.conv(torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1))
        q, k, v = (t.reshape(batch, seq_len, h, d) for t in qkv.chunk(3, dim=-1))
        if self.member in ("gdn", "delta_rule", "kda"):
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        dtype = v.dtype
        # The kernels take fp32/bf16/fp16: a float64 model (step_check's) hands them fp32.
        run = torch.float32 if dtype == torch.float64 and self.backend == "ours" else dtype
        o = self._recurrence(x, q.to(run), k.to(run), v.to(run)).to(dtype)
        o = self.o_norm(o).reshape(batch, seq_len, h * d)
        return self.o_proj(o * F.silu(self.gate_proj(x)))

    def _recurrence(
        self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """The member's recurrence on prepared q, k, v; the gates are derived from x here."""
        batch, seq_len, h, d = q.shape
        ours = self.backend == "ours"
        naive = {"compute_dtype": self.naive_dtype}
        gate = torch.float32  # fp32 gates, or the model's float64 for the naive oracle
        if x.dtype == torch.float64 and not ours:
            gate = torch.float64
        if self.member in ("gdn", "delta_rule", "kda"):
            beta = torch.sigmoid(self.b_proj(x).to(gate)).to(q.dtype)
        if self.member == "gdn":
            from kernelgate.kernels.gdn import (
                chunk_gated_delta_rule,
                naive_recurrent_gated_delta_rule,
            )

            a = self.a_proj(x).to(gate) + self.dt_bias.to(gate)
            g = -self.A_log.to(gate).exp() * F.softplus(a)
            if ours:
                return chunk_gated_delta_rule(q, k, v, g, beta)[0]
            return naive_recurrent_gated_delta_rule(q, k, v, g, beta, **naive)[0]
        if self.member == "delta_rule":
            from kernelgate.kernels.delta_rule import chunk_delta_rule, naive_recurrent_delta_rule

            if ours:
                return chunk_delta_rule(q, k, v, beta)[0]
            return naive_recurrent_delta_rule(q, k, v, beta, **naive)[0]
        if self.member == "gla":
            from kernelgate.kernels.gla import chunk_gla, naive_recurrent_gla

            g = F.logsigmoid(self.gk_proj(x).to(gate)) / 16
            g = g.reshape(batch, seq_len, h, d)
            if ours:
                return chunk_gla(q, k, v, g)[0]
            return naive_recurrent_gla(q, k, v, g, **naive)[0]
        if self.member == "kda":
            from kernelgate.kernels.kda import chunk_kda, naive_recurrent_kda

            f = (self.f_proj(x).to(gate) + self.dt_bias.to(gate)).reshape(batch, seq_len, h, d)
            g = -self.A_log.to(gate).exp()[:, None] * F.softplus(f)
            if ours:
                return chunk_kda(q, k, v, g, beta)[0]
            return naive_recurrent_kda(q, k, v, g, beta, **naive)[0]
        from kernelgate.kernels.mamba2 import chunk_ssd, naive_recurrent_ssd

        dt = F.softplus(self.a_proj(x).to(gate) + self.dt_bias.to(gate))
        A = -self.A_log.to(gate).exp()
        D = self.D.to(gate)
        if ours:
            return chunk_ssd(v, dt, A, k, q, D)[0]
        return naive_recurrent_ssd(v, dt, A, k, q, D, **naive)[0]


class MLP(nn.Module):
    """SwiGLU feed-forward, hidden width ``mlp_ratio * d_model * 2 / 3`` rounded to 8 (so its
    parameter count is that of a plain 4x MLP at ratio 4)."""

    def __init__(self, d_model: int, mlp_ratio: int) -> None:
        super().__init__()
        hidden = 8 * math.ceil(mlp_ratio * d_model * 2 / 3 / 8)
        self.up = nn.Linear(d_model, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    """Pre-norm residual block: x + mixer(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, member: str, config: MQARConfig, backend: str) -> None:
        super().__init__()
        self.mixer_norm = nn.RMSNorm(config.d_model, eps=1e-6)
        self.mixer = TokenMixer(
            member, config.d_model, config.heads, config.head_dim, config.conv_size, backend
        )
        self.mlp_norm = nn.RMSNorm(config.d_model, eps=1e-6)
        self.mlp = MLP(config.d_model, config.mlp_ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mixer(self.mixer_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class MQARModel(nn.Module):
    """Token embedding, ``depth`` blocks, final RMSNorm and a (tied or untied) LM head.

    Linear weights are N(0, 0.02); each residual branch's output projection is further
    scaled by 1 / sqrt(2 depth) (GPT-2's rule) so the residual stream's variance at init does
    not grow with depth."""

    def __init__(self, member: str, config: MQARConfig, backend: str = "ours") -> None:
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
        self.member, self.config = member, config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(member, config, backend) for _ in range(config.depth))
        self.norm = nn.RMSNorm(config.d_model, eps=1e-6)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_embeddings:
            self.head.weight = self.embed.weight

    def _init_weights(self) -> None:
        residual_std = 0.02 / math.sqrt(2 * self.config.depth)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = residual_std if name.endswith(("o_proj", "mlp.down")) else 0.02
                nn.init.normal_(module.weight, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def set_backend(
    model: nn.Module, backend: str, naive_dtype: torch.dtype | None = None
) -> nn.Module:
    """Switch every TokenMixer of ``model`` to ``backend`` ("ours" or "naive"), and the naive
    recurrence's compute dtype when given; returns ``model``."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    for module in model.modules():
        if isinstance(module, TokenMixer):
            module.backend = backend
            if naive_dtype is not None:
                module.naive_dtype = naive_dtype
    return model


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (a tied head counted once)."""
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------------
# Training


def _autocast(device: torch.device, enabled: bool) -> torch.autocast:
    """bf16 autocast on CUDA when enabled; a disabled context elsewhere."""
    kind = device.type if device.type in ("cuda", "cpu") else "cpu"
    return torch.autocast(kind, dtype=torch.bfloat16, enabled=enabled and kind == "cuda")


def mqar_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the query positions only, in fp32 (or float64 for a float64
    model)."""
    return F.cross_entropy(
        logits.to(torch.promote_types(logits.dtype, torch.float32)).reshape(-1, logits.shape[-1]),
        targets.reshape(-1),
        ignore_index=IGNORE_INDEX,
    )


def make_optimizer(model: nn.Module, config: MQARConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: norms, biases, gate parameters (A_log,
    dt_bias, D) and the convolution are left undecayed, as in every member's reference."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_matrix = p.dim() >= 2 and not name.endswith("conv.weight")
        (decay if is_matrix else no_decay).append(p)
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": config.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=config.lr,
        betas=config.betas,
        eps=config.adam_eps,
    )


def lr_factor(step: int, config: MQARConfig, total_steps: int) -> float:
    """Linear warm-up, then constant or cosine down to 10% at ``total_steps``."""
    if config.warmup_steps and step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "cosine":
        span = max(1, total_steps - config.warmup_steps)
        progress = min(1.0, (step - config.warmup_steps) / span)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
    return 1.0


def _train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    config: MQARConfig,
    amp: bool,
) -> float:
    """Forward, backward, gradient clipping and one optimizer step; returns the loss."""
    optimizer.zero_grad(set_to_none=True)
    with _autocast(inputs.device, amp):
        logits = model(inputs)
    loss = mqar_loss(logits, targets)
    loss.backward()
    if config.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    optimizer.step()
    return loss.item()


EVAL_SEED_OFFSET = 1_000_003  # eval batches are seeded far from any training step's seed


@torch.no_grad()
def evaluate(
    model: nn.Module, config: MQARConfig, seed: int, device: str | torch.device, amp: bool = True
) -> dict[str, float]:
    """Loss and recall (argmax accuracy at query positions) on the held-out set of ``seed``:
    ``config.eval_examples`` examples in batches of ``config.batch_size``, drawn from seeds no
    training batch uses, identical for every member and every call."""
    was_training = model.training
    model.eval()
    device = torch.device(device)
    total_loss, correct, count = 0.0, 0, 0
    batches = math.ceil(config.eval_examples / config.batch_size)
    for i in range(batches):
        size = min(config.batch_size, config.eval_examples - i * config.batch_size)
        inputs, targets = mqar_batch(
            config.vocab_size,
            config.seq_len,
            config.num_kv_pairs,
            size,
            seed + EVAL_SEED_OFFSET + i,
            device,
        )
        with _autocast(device, amp):
            logits = model(inputs)
        mask = targets != IGNORE_INDEX
        n = int(mask.sum())
        total_loss += mqar_loss(logits, targets).item() * n
        correct += int((logits.argmax(dim=-1)[mask] == targets[mask]).sum())
        count += n
    model.train(was_training)
    return {"loss": total_loss / count, "recall": correct / count}


def train(
    member: str,
    config: MQARConfig,
    steps: int,
    *,
    device: str | torch.device = "cpu",
    backend: str = "ours",
    seed: int = 0,
    time_budget: float | None = None,
    naive_dtype: torch.dtype = torch.float32,
    on_record: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train one member's model on MQAR for ``steps`` steps (fewer if ``time_budget``
    seconds run out) and return its history as plain data.

    Training batch i is ``mqar_batch(..., seed=seed + i)``: an endless stream of fresh
    examples, reproducible per step. Recall is measured on the held-out set at step 0, every
    ``config.eval_every`` steps and at the end. The budget check runs before each step and
    reserves the time of the last evaluation, so the final evaluation still fits and a run
    stopped by its budget returns a complete history. ``naive_dtype`` is the naive
    recurrence's compute dtype when ``backend="naive"`` (fp32: a training run, not an
    oracle). ``on_record(kind, record)`` is called with every "train" and "eval" record (for
    progress bars and incremental saving).

    Returns ``{"member", "backend", "parameters", "steps_done", "stopped_by", "seconds",
    "train": [{"step", "loss", "lr", "seconds"}], "eval": [{"step", "loss", "recall",
    "seconds"}]}``; ``seconds`` counts from the start of training (model built, first eval
    included, kernel compilation included).
    """
    device = torch.device(device)
    torch.manual_seed(seed)
    model = MQARModel(member, config, backend).to(device)
    set_backend(model, backend, naive_dtype)
    optimizer = make_optimizer(model, config)
    amp = config.amp and device.type == "cuda"
    history: dict[str, Any] = {
        "member": member,
        "backend": backend,
        "parameters": count_parameters(model),
        "steps_done": 0,
        "stopped_by": "steps",
        "train": [],
        "eval": [],
    }
    start = time.perf_counter()
    last_eval_seconds = 0.0

    def record_eval(step: int) -> None:
        nonlocal last_eval_seconds
        t0 = time.perf_counter()
        result = evaluate(model, config, seed, device, amp)
        last_eval_seconds = time.perf_counter() - t0
        rec = {"step": step, **result, "seconds": time.perf_counter() - start}
        history["eval"].append(rec)
        if on_record:
            on_record("eval", rec)

    record_eval(0)
    step = 0
    step_seconds = 0.0
    while step < steps:
        elapsed = time.perf_counter() - start
        if time_budget is not None and elapsed + step_seconds + last_eval_seconds > time_budget:
            history["stopped_by"] = "time_budget"
            break
        t0 = time.perf_counter()
        factor = lr_factor(step, config, steps)
        for group in optimizer.param_groups:
            group["lr"] = config.lr * factor
        inputs, targets = mqar_batch(
            config.vocab_size,
            config.seq_len,
            config.num_kv_pairs,
            config.batch_size,
            seed + step,
            device,
        )
        loss = _train_step(model, optimizer, inputs, targets, config, amp)
        step += 1
        step_seconds = time.perf_counter() - t0
        rec = {
            "step": step,
            "loss": loss,
            "lr": config.lr * factor,
            "seconds": time.perf_counter() - start,
        }
        history["train"].append(rec)
        if on_record:
            on_record("train", rec)
        if not math.isfinite(loss):
            history["stopped_by"] = "non-finite loss"
            break
        if step % config.eval_every == 0 and step < steps:
            record_eval(step)
    if not history["eval"] or history["eval"][-1]["step"] != step:
        record_eval(step)
    history["steps_done"] = step
    history["seconds"] = time.perf_counter() - start
    return history


# --------------------------------------------------------------------------------------------
# One optimizer step: ours against the naive recurrence


def _rel(diff: float, scale: float) -> float:
    return diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)


def step_check(
    member: str,
    config: MQARConfig,
    seed: int = 0,
    *,
    device: str | torch.device = "cpu",
    naive_dtype: torch.dtype = torch.float64,
    model_dtype: torch.dtype = torch.float64,
    batch_size: int | None = None,
    optimizer: str = "adamw",
) -> dict[str, Any]:
    """One optimizer step of one model through our kernels and through the naive recurrence,
    from the same weights on the same batch; the relative error of the parameter update.

    The model is built once and deep-copied, the copy switched to the naive recurrence in
    ``naive_dtype``. By default both copies hold their weights and run everything but the
    recurrence (embedding, projections, norms, MLP, loss, optimizer) in float64
    (``model_dtype``), our kernels get fp32 inputs (their precision) and the naive
    recurrence runs in float64 (the oracle's). Then the only difference between the two
    steps is our kernels' fp32 error: in an fp32 model the update, a difference of two fp32
    parameters ~100x larger than it, would carry the parameters' rounding (measured: 1e-5
    relative at the tiny config, 40x the gradients' own error) and the check would measure
    that. bf16 autocast is off for the same reason. TF32 is turned off for the check's
    duration on CUDA.

    ``optimizer`` is "adamw" (the training optimizer and settings) or "sgd" (plain
    ``lr * grad``, whose update error is the gradients'). AdamW's first step is
    ``lr * g / (|g| + eps)``, sign(g) wherever |g| >> eps, so it divides each gradient's error
    by that gradient's own size: near-zero gradients (|g| ~ eps = 1e-8) turn an absolute
    error of 1e-9 into an update error of 0.1 lr. Its max-norm update error therefore
    measures the optimizer's conditioning as much as the kernel, and the results carry
    "grad_rel_err" (max-norm, over all gradients) and "update_rel_err_l2" (||d_ours - d_naive||
    / ||d_naive|| over all parameters) beside it.

    Returns ``{"member", "optimizer", "naive_dtype", "model_dtype", "update_rel_err"
    (max|d_ours - d_naive| / max|d_naive| over all parameters), "update_rel_err_l2",
    "worst_param", "per_param" {name: max-norm ratio within the parameter}, "grad_rel_err",
    "loss_ours", "loss_naive", "loss_diff"}``.
    """
    if optimizer not in ("adamw", "sgd"):
        raise ValueError(f"optimizer must be 'adamw' or 'sgd', got {optimizer!r}")
    device = torch.device(device)
    config = replace(config, amp=False)
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        torch.manual_seed(seed)
        ours = MQARModel(member, config, "ours").to(device, model_dtype)
        naive = set_backend(copy.deepcopy(ours), "naive", naive_dtype)
        inputs, targets = mqar_batch(
            config.vocab_size,
            config.seq_len,
            config.num_kv_pairs,
            batch_size or config.batch_size,
            seed,
            device,
        )
        results = {}
        for name, model in (("ours", ours), ("naive", naive)):
            before = {n: p.detach().clone() for n, p in model.named_parameters()}
            if optimizer == "adamw":
                opt: torch.optim.Optimizer = make_optimizer(model, config)
            else:
                opt = torch.optim.SGD(model.parameters(), lr=config.lr)
            loss = _train_step(model, opt, inputs, targets, config, amp=False)
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
            deltas = {n: p.detach() - before[n] for n, p in model.named_parameters()}
            results[name] = (loss, grads, deltas)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32

    def compare(
        a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]
    ) -> tuple[float, float, dict[str, float]]:
        """(max-norm relative error, L2 relative error, per-parameter max-norm errors)."""
        per_param, worst_diff, worst_scale, sq_diff, sq_ref = {}, 0.0, 0.0, 0.0, 0.0
        for n in b:
            delta = a[n].double() - b[n].double()
            diff, scale = delta.abs().max().item(), b[n].double().abs().max().item()
            per_param[n] = _rel(diff, scale)
            worst_diff, worst_scale = max(worst_diff, diff), max(worst_scale, scale)
            sq_diff += delta.square().sum().item()
            sq_ref += b[n].double().square().sum().item()
        return _rel(worst_diff, worst_scale), _rel(sq_diff**0.5, sq_ref**0.5), per_param

    loss_ours, grads_ours, deltas_ours = results["ours"]
    loss_naive, grads_naive, deltas_naive = results["naive"]
    update_rel_err, update_rel_err_l2, per_param = compare(deltas_ours, deltas_naive)
    grad_rel_err, _, _ = compare(grads_ours, grads_naive)
    return {
        "member": member,
        "optimizer": optimizer,
        "naive_dtype": str(naive_dtype).removeprefix("torch."),
        "model_dtype": str(model_dtype).removeprefix("torch."),
        "update_rel_err": update_rel_err,
        "update_rel_err_l2": update_rel_err_l2,
        "worst_param": max(per_param, key=lambda n: per_param[n]),
        "per_param": per_param,
        "grad_rel_err": grad_rel_err,
        "loss_ours": loss_ours,
        "loss_naive": loss_naive,
        "loss_diff": abs(loss_ours - loss_naive),
    }
