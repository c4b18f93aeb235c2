"""Small models the dump and compare tests train."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class FixtureNet(nn.Module):
    """The model of tests/fixtures/reference-dumps/pytorch/make_fixtures.py."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.fc = nn.Linear(8 * 6 * 6, 10)

    def forward(self, x):
        x = F.relu(self.conv(x))
        x = x.flatten(1)
        return self.fc(x)


class MixedNet(nn.Module):
    """Conv, linear, layernorm, attention, dropout and in-place ops, forward and backward."""

    def __init__(self, width: int = 16, leaky: bool = False):
        super().__init__()
        self.conv = nn.Conv1d(width, width, 3, padding=1)
        self.norm = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, 2, batch_first=True)
        self.fc = nn.Linear(width, width)
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(width, 4)
        self.leaky = leaky

    def forward(self, x):
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        y = self.fc(x)
        y = F.leaky_relu(y, 0.2) if self.leaky else F.relu(y)
        y = self.dropout(y) + 1.0
        y.mul_(0.5)  # in-place on an activation
        return self.head(y.mean(dim=1))


def train_fixture_net(debugger, steps: int = 2, seed: int = 1234) -> FixtureNet:
    """The fixtures' training loop, step for step."""
    from msprobe.pytorch import seed_all

    seed_all(seed)
    model = FixtureNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if debugger is not None and callable(debugger):
        debugger = debugger(model)
    for _ in range(steps):
        if debugger is not None:
            debugger.start()
        x = torch.randn(4, 3, 8, 8)
        y = torch.randint(0, 10, (4,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if debugger is not None:
            debugger.stop()
            debugger.step()
    return model


def train_mixed_net(make_debugger=None, steps: int = 2, seed: int = 7, leaky: bool = False):
    """Returns the model and the per-step losses; make_debugger(model) builds the debugger (or None)."""
    torch.manual_seed(seed)
    model = MixedNet(leaky=leaky)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    debugger = make_debugger(model) if make_debugger is not None else None
    losses = []
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if debugger is not None:
            debugger.start()
        x = torch.randn(3, 5, 16, generator=generator)
        y = torch.randint(0, 4, (3,), generator=generator)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().clone())
        if debugger is not None:
            debugger.stop()
            debugger.step()
    return model, losses


def train_beside_a_failing_tool(tmp_path, caplog) -> list[str]:
    """Trains the mixed net without the tool, then with a statistics L1 dump whose own work fails somewhere
    (the caller arranges where): the losses must be the same, each failure logged once; returns the messages."""
    import logging

    from msprobe.pytorch import PrecisionDebugger

    _, plain_losses = train_mixed_net(None)
    with caplog.at_level(logging.WARNING):
        _, losses = train_mixed_net(
            lambda model: PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path), model=model)
        )
    assert all(torch.equal(a, b) for a, b in zip(plain_losses, losses))
    failures = [r.getMessage() for r in caplog.records if "simulated failure" in r.getMessage()]
    assert failures and len(failures) == len(set(failures))  # once per API
    return failures
