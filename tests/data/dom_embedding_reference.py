"""An embedding lookup: token ids index the model's table of ``vocab`` rows."""

import torch
import torch.nn as nn

batch = 4
seq = 32
vocab = 100
hidden = 16


class Model(nn.Module):
    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab, hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randint(0, vocab, (batch, seq))]


def get_init_inputs() -> list[int]:
    return [vocab, hidden]
