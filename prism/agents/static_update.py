"""A backbone's update over static (preallocated) buffers, run eagerly or replayed from one CUDA graph.

One update of every member is split in two:

1. **the replay draw** (:meth:`StaticReplayDraw.draw`, always eager): member s's indices are drawn from its own
   replay generator straight into row s of a static ``[S, B]`` index buffer on the run's device. The ring
   sizes change every env step, and a captured kernel would bake them in, so this stays outside any graph
   (S tiny launches);
2. **the body** (:class:`StaticUpdate`, capturable): gather the rows into a static ``[S, B, D]`` batch, run the
   backbone's ``update(batch)`` (losses, backward, capturable Adam, in-place Polyak) and copy its logged terms
   into a static ``[S, T]`` diagnostics buffer. Nothing in it reads a device value on the host.

On the CPU (and on CUDA with ``agent.cuda_graph: false``) the body runs eagerly and is *the same computation*
as ``update(buffer.sample_members(...))``: the same draws from the same generators (``random_(lo, lo + n)`` is
``torch.randint(n) + lo`` draw for draw), the same gathered values, the same update
(``tests/test_static_update.py`` checks it bit for bit against a reference written from the pure losses).
With ``agent.cuda_graph: true`` on CUDA, the first ``warmup`` updates run eagerly on a side stream (they are real
updates: they also allocate the optimiser state), the next one is captured into a ``torch.cuda.CUDAGraph`` (as
:func:`torch.cuda.graph` captures: a side stream, the graph's private memory pool) and every update from then on
is one ``graph.replay()``; the graph is dropped (and re-captured) whenever what it
points at changes (a new buffer or optimiser state, a relabel function, which always runs eagerly) or may
have been freed: the PRISM loop drops it after every reward fit, whose Lightning Trainer frees cuBLAS's
workspaces and the allocator's cache (``CAPQLModule.drop_captured_graphs``; the crash it prevents is on
record, the workspace as its cause is inferred)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from prism.data.replay import ReplayBatch, ReplayBuffer


class StaticReplayDraw:
    """Static index ``[S, B]`` and row ``[S, B, D]`` buffers for drawing replay batches of ``buffer``.

    ``batch`` holds column views of the static rows (a :class:`ReplayBatch` whose tensors never move), so a
    captured update that reads it sees every new draw."""

    def __init__(self, buffer: ReplayBuffer, batch_size: int):
        self.buffer = buffer
        members, device = buffer.members, buffer.device
        self.index = torch.empty(members, batch_size, dtype=torch.long, device=device)
        self.rows = torch.empty(members, batch_size, buffer.width, dtype=torch.float32, device=device)
        self.batch: ReplayBatch = buffer._split(self.rows)
        self._flat_storage = buffer.storage.view(members * buffer.capacity, buffer.width)
        self._flat_index = self.index.view(-1)
        self._flat_rows = self.rows.view(-1, buffer.width)

    def draw(self, generators: Sequence[torch.Generator | None]) -> None:
        """Member s's ``B`` indices, uniform over its stored rows, from ``generators[s]``, into ``index[s]``.

        ``random_(lo, lo + n)`` draws ``random % n + lo``: exactly ``torch.randint(n) + lo`` (the draw of
        :meth:`ReplayBuffer.sample_members`) with the member's ring offset ``lo = s·capacity`` folded in, one
        launch per member. Host ints only (the ring sizes live on the host): no device read."""
        sizes, capacity = self.buffer.sizes, self.buffer.capacity
        if sizes.min() == 0:
            raise RuntimeError("ReplayBuffer.sample: the buffer is empty")
        for s in range(self.buffer.members):
            low = s * capacity
            self.index[s].random_(low, low + int(sizes[s]), generator=generators[s])

    def gather(self) -> ReplayBatch:
        """Copy the drawn rows into the static rows (capturable: fixed addresses, no host read)."""
        torch.index_select(self._flat_storage, 0, self._flat_index, out=self._flat_rows)
        return self.batch


class StaticUpdate:
    """Runs ``update(batch) -> terms [S, T]`` on static replay draws, eagerly or from a CUDA graph.

    Args:
        draw: the static replay buffers.
        update: the backbone's update of every member (must not read device values on the host when
            graphed: it is captured once and replayed).
        n_terms: T, the number of logged terms.
        cuda_graph: capture on CUDA (ignored elsewhere: the same body runs eagerly).
        graph_generators: the device generators the body draws from (the policy noise): registered with the
            graph so each replay draws fresh numbers, exactly the ones the eager body would draw.
        warmup: eager updates (on a side stream) before the capture.
    """

    def __init__(
        self,
        draw: StaticReplayDraw,
        update: Callable[[ReplayBatch], torch.Tensor],
        n_terms: int,
        *,
        cuda_graph: bool = False,
        graph_generators: Sequence[torch.Generator] = (),
        warmup: int = 3,
    ):
        self.draw = draw
        self.update = update
        self.terms = torch.zeros(draw.buffer.members, n_terms, device=draw.buffer.device)
        self.use_graph = bool(cuda_graph) and draw.buffer.device.type == "cuda"
        self.graph_generators = list(graph_generators)
        self.warmup = warmup
        self.graph: torch.cuda.CUDAGraph | None = None
        self._eager_done = 0
        self._side: torch.cuda.Stream | None = None
        self.captures = 0
        """How many times the body was captured (a test checks that shapes trigger exactly one capture)."""

    def _side_stream(self) -> torch.cuda.Stream:
        if self._side is None:
            self._side = torch.cuda.Stream(device=self.draw.buffer.device)
        return self._side

    def invalidate(self) -> None:
        """Drop the graph (what it points at changed); the next graphed update warms up and re-captures."""
        self.graph = None
        self._eager_done = 0

    def _body(self, relabel_fn: Callable[[ReplayBatch], ReplayBatch] | None) -> None:
        batch = self.draw.gather()
        if relabel_fn is not None:
            batch = relabel_fn(batch)
        self.terms.copy_(self.update(batch))

    def __call__(
        self,
        generators: Sequence[torch.Generator | None],
        relabel_fn: Callable[[ReplayBatch], ReplayBatch] | None = None,
    ) -> torch.Tensor:
        """One update of every member; returns the static terms ``[S, T]`` (overwritten by the next call)."""
        self.draw.draw(generators)
        # A relabel function calls a reward model that is replaced at every refit: it always runs eagerly.
        if not self.use_graph or relabel_fn is not None:
            self.invalidate()
            self._body(relabel_fn)
        elif self.graph is not None:
            self.graph.replay()
        elif self._eager_done < self.warmup:
            # Warm-up on a side stream (as torch.cuda.graph's docs ask): real updates, which also allocate
            # the optimiser state the capture then points at.
            side = self._side_stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._body(None)
            torch.cuda.current_stream().wait_stream(side)
            self._eager_done += 1
        else:
            graph = torch.cuda.CUDAGraph()
            for generator in self.graph_generators:
                graph.register_generator_state(generator)
            # What torch.cuda.graph does (capture on a side stream into the graph's private memory pool),
            # without its gc.collect() and empty_cache(): a re-capture (new optimisers at every Trainer.fit)
            # then costs one update's Python time, not a garbage collection of the whole process.
            side = self._side_stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                graph.capture_begin()
                try:
                    self._body(None)  # recorded, not run: the replay below is this update
                finally:
                    graph.capture_end()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = graph
            self.captures += 1
            graph.replay()
        return self.terms
