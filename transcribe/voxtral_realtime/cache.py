"""Sliding-window key/value caches for Voxtral Realtime's encoder and decoder (transformers'
`DynamicSlidingWindowLayer`: a query at position q sees the keys at positions q - window + 1 .. q).

Each layer's keys (already rotated) and values sit in order in one buffer [1, heads, capacity, head_dim]. When new
rows would not fit, the rows no future query can see are dropped: the last `window - 1` are moved to the front (a
query at the next position sees no further back). The buffer starts small and grows to `window - 1 + room` slots,
so a short input costs a short cache and an hours-long stream a fixed one, moved once every `room` rows.

The attention reads the filled slots in order under a mask built from absolute positions, so its result is the
same however the stream was cut into calls."""
from __future__ import annotations

from typing import Optional

import torch


class WindowCache:
    """Keys and values of `layers` layers for one sequence; `start` is the absolute position of slot 0 and
    `length` the slots filled (so the next row's position is `start + length`)."""

    def __init__(self, layers: int, heads: int, head_dim: int, window: Optional[int], dtype: torch.dtype,
                 device: torch.device, room: int = 256):
        self.layers, self.heads, self.head_dim = layers, heads, head_dim
        self.window = window
        self.dtype, self.device = dtype, device
        self.room = max(int(room), 1)
        self.k: list[Optional[torch.Tensor]] = [None] * layers
        self.v: list[Optional[torch.Tensor]] = [None] * layers
        self.start = 0
        self.length = 0

    @property
    def position(self) -> int:
        """The absolute position of the next row."""
        return self.start + self.length

    @property
    def capacity(self) -> int:
        return 0 if self.k[0] is None else self.k[0].shape[2]

    def reserve(self, n: int) -> None:
        """Makes room for `n` more rows: drops what no future query sees, then grows the buffers if needed. Called
        once per forward, before the layers write their rows (every layer's buffer moves alike)."""
        need = self.length + n
        if need <= self.capacity:
            return
        keep = self.length
        if self.window is not None and self.length > self.window - 1:
            keep = self.window - 1
        drop = self.length - keep
        grow = max(2 * self.capacity, 64)
        limit = None if self.window is None else self.window - 1 + self.room
        cap = max(keep + n, grow if limit is None else min(grow, limit))
        for store in (self.k, self.v):
            for i, t in enumerate(store):
                new = torch.zeros(1, self.heads, cap, self.head_dim, dtype=self.dtype, device=self.device)
                if t is not None and keep:
                    new[:, :, :keep] = t[:, :, drop:self.length]
                store[i] = new
        self.start += drop
        self.length = keep

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stores a layer's new rows [1, heads, n, dim] after the filled slots (reserve() made room); the filled
        keys and values with them. `commit(n)` advances the length once every layer has written."""
        n = k.shape[2]
        end = self.length + n
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def commit(self, n: int) -> None:
        self.length += n

    def mask(self, n: int) -> Optional[torch.Tensor]:
        """The attention mask of `n` new queries over the filled slots and themselves ([n, length + n], True where
        a query sees a key), or None when every query sees every key it may (one query inside the window)."""
        total = self.length + n
        if n == 1 and (self.window is None or total <= self.window):
            return None
        q = torch.arange(self.length, total, device=self.device)[:, None]
        k = torch.arange(total, device=self.device)[None, :]
        allowed = k <= q
        if self.window is not None:
            allowed = allowed & (q - k < self.window)
        return allowed
