"""A model with one module that cannot take fp16, for docs/bisect.md:
``msprobe -f pytorch precision_bisect -s examples/precision_bisect.py --dtype fp16``."""

import torch
from torch import nn


class NaiveSoftmax(nn.Module):
    """A softmax written without subtracting the row's maximum first: exp overflows fp16 above 11."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return e / e.sum(-1, keepdim=True)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.attend = NaiveSoftmax()
        self.fc = nn.Linear(16, 32)
        self.act = nn.GELU()
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.proj(x) * 15.0  # sharp attention scores
        return self.head(self.act(self.fc(self.attend(scores))))


def model_and_inputs():
    torch.manual_seed(0)
    return Net(), (torch.randn(8, 16),)


def loss(output: torch.Tensor) -> torch.Tensor:
    return output.square().mean()
