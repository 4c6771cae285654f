"""Flat storage of reward-model training data: steps grouped into released segments (docs/method.md §3–§4).

A *segment* is the run of steps since the previous release of the sparse channel; its target is the sum the
wrapper released on its last step. The store keeps every step of every segment as rows of flat tensors:

- ``features [N, F]``: ``h_t = [s_t, a_t, r_dense_t]`` (or ``[s_t, a_t]`` for the "w/o dense" ablation);
- ``segment_index [N]``: which segment each step belongs to (long, non-decreasing);
- ``true_sparse [N]``: the step's *true* sparse reward (diagnostics only: never a training target);
- ``targets [S]``: the released sum of each segment;
- ``segment_offsets [S+1]``: segment ``i`` is rows ``offsets[i]:offsets[i+1]``;
- ``step_flags [N]`` (uint8): :data:`EPISODE_FINAL` on an episode's last step, plus :data:`TERMINATED` when
  that episode ended by termination rather than truncation (diagnostics only: the fit never reads them);
- ``collection_starts``: the segment index at which each collection began (random first, then each expert
  collection), so diagnostics can tell the data of one collection from another's;
- ``next_obs [N, obs_dim]`` (only in a store made with ``next_obs=True``, for a reward model that reads
  ``s_{t+1}``, e.g. RRD): the observation each step led to. On an episode's last step it is the final
  observation ``env.step`` returned (terminal or truncated), never the next episode's reset observation.
  ReSymNet's stores leave it out, so their size and saved format are what they were.

Rows live in pre-allocated buffers that double when full, so adding the data of a new refinement cycle costs
amortised O(new rows) and never builds per-step Python objects.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

_FORMAT_VERSION = 3
"""2 added ``step_flags`` and ``collection_starts``; a version-1 store loads with no step flagged and no
collection marked (what was not recorded is not invented). 3 added the optional ``next_obs``: a store without
it is still written as version 2 (byte for byte what it was), and a version-1/2 store loads without it."""
_FORMAT_WITHOUT_NEXT_OBS = 2

EPISODE_FINAL = 1
"""``step_flags`` bit: the step is the last of its episode (terminated or truncated)."""
TERMINATED = 2
"""``step_flags`` bit: the step is the last of an episode that *terminated* (the MDP's own end, e.g. the hopper
fell), as opposed to one cut by the time limit."""


class SegmentStore:
    """Growing flat store of segments; see the module docstring.

    Args:
        obs_dim: observation width (the first ``obs_dim`` feature columns).
        act_dim: action width (the next ``act_dim`` columns).
        n_dense: number of dense-reward columns after them (0 when collected without dense rewards).
        capacity: initial number of step rows to allocate (grows automatically).
        next_obs: also keep each step's next observation (:attr:`next_obs`; for a reward model reading
            ``s_{t+1}``). Then :meth:`add_episode` needs ``next_obs`` for every episode.
    """

    def __init__(
        self, obs_dim: int, act_dim: int, n_dense: int, capacity: int = 4096, *, next_obs: bool = False
    ):
        if obs_dim < 0 or act_dim < 0 or n_dense < 0 or obs_dim + act_dim + n_dense == 0:
            raise ValueError(f"SegmentStore: bad widths obs={obs_dim} act={act_dim} dense={n_dense}")
        self.obs_dim = int(obs_dim)
        self.act_dim = int(act_dim)
        self.n_dense = int(n_dense)
        capacity = max(int(capacity), 1)
        self._features = torch.zeros(capacity, self.feature_dim)
        self._segment_index = torch.zeros(capacity, dtype=torch.long)
        self._true_sparse = torch.zeros(capacity)
        self._step_flags = torch.zeros(capacity, dtype=torch.uint8)
        self._next_obs = torch.zeros(capacity, self.obs_dim) if next_obs else None
        self._targets = torch.zeros(max(capacity // 8, 1))
        self._offsets = torch.zeros(max(capacity // 8, 1) + 1, dtype=torch.long)
        self._n = 0
        self._s = 0
        self.num_episodes = 0
        self.collection_starts: list[int] = []

    # ---- sizes and views ----------------------------------------------------------------------------
    @property
    def feature_dim(self) -> int:
        """``F = obs_dim + act_dim + n_dense``."""
        return self.obs_dim + self.act_dim + self.n_dense

    def __len__(self) -> int:
        """Number of stored steps N."""
        return self._n

    @property
    def num_segments(self) -> int:
        """Number of stored segments S."""
        return self._s

    @property
    def features(self) -> Tensor:
        return self._features[: self._n]

    @property
    def segment_index(self) -> Tensor:
        return self._segment_index[: self._n]

    @property
    def true_sparse(self) -> Tensor:
        return self._true_sparse[: self._n]

    @property
    def step_flags(self) -> Tensor:
        """``[N]`` uint8: :data:`EPISODE_FINAL` / :data:`TERMINATED` bits of each step."""
        return self._step_flags[: self._n]

    @property
    def has_next_obs(self) -> bool:
        """Whether the store keeps each step's next observation."""
        return self._next_obs is not None

    @property
    def next_obs(self) -> Tensor:
        """``[N, obs_dim]``: the observation each step led to (only when :attr:`has_next_obs`)."""
        if self._next_obs is None:
            raise ValueError("SegmentStore: this store keeps no next observations (made with next_obs=False)")
        return self._next_obs[: self._n]

    @property
    def terminated_steps(self) -> Tensor:
        """``[N]`` bool: the steps that terminated their episode (the :data:`TERMINATED` bit, set only on the
        last step of an episode that ended by termination; never on a truncated one, never mid-episode)."""
        return (self.step_flags & TERMINATED) != 0

    def inputs(self, use_dense: bool = True, next_obs: bool = False, terminal: bool = False) -> Tensor:
        """``[N, F']`` per-step model inputs ``[s_t, a_t, (r_dense_t), (s_{t+1}), (d_t)]`` (the column groups a
        reward model reads, :func:`prism.data.features.build_features`'s layout). ``use_dense`` is ignored by a
        store without dense columns; ``next_obs`` needs a store that keeps them (one-line ``ValueError``
        otherwise); ``terminal`` appends the termination flag :attr:`terminated_steps` as 0/1. Without
        ``next_obs`` and ``terminal`` it is a view of :attr:`features`."""
        width = self.obs_dim + self.act_dim + (self.n_dense if use_dense else 0)
        columns = self.features[:, :width]
        parts = [columns]
        if next_obs:
            if self._next_obs is None:
                raise ValueError(
                    "SegmentStore: the reward model reads next observations, but this store keeps none "
                    "(collected for a model that does not)"
                )
            parts.append(self.next_obs)
        if terminal:
            # The same flag the shaper hands the model at an env step (the env's ``terminated``).
            parts.append(self.terminated_steps.to(columns.dtype)[:, None])
        return columns if len(parts) == 1 else torch.cat(parts, dim=1)

    @property
    def targets(self) -> Tensor:
        return self._targets[: self._s]

    @property
    def segment_offsets(self) -> Tensor:
        return self._offsets[: self._s + 1]

    @property
    def segment_lengths(self) -> Tensor:
        off = self.segment_offsets
        return off[1:] - off[:-1]

    def segment_collections(self) -> Tensor:
        """``[S]`` long: the index (in :attr:`collection_starts`) of the collection each segment came from; -1
        for segments added before any collection was marked."""
        starts = torch.tensor(self.collection_starts, dtype=torch.long)
        return torch.bucketize(torch.arange(self._s), starts, right=True) - 1

    def begin_collection(self) -> None:
        """Mark that the segments added from now on belong to a new collection."""
        self.collection_starts.append(self._s)

    # ---- growth ---------------------------------------------------------------------------------------
    @staticmethod
    def _grow(buf: Tensor, needed: int) -> Tensor:
        if needed <= buf.shape[0]:
            return buf
        new_cap = max(needed, 2 * buf.shape[0])
        out = torch.zeros((new_cap, *buf.shape[1:]), dtype=buf.dtype)
        out[: buf.shape[0]] = buf
        return out

    def add_episode(
        self,
        features: Tensor | np.ndarray,
        released: Tensor | np.ndarray,
        emitted_sparse: Tensor | np.ndarray,
        true_sparse: Tensor | np.ndarray,
        terminated: bool | None = None,
        next_obs: Tensor | np.ndarray | None = None,
    ) -> int:
        """Append the steps of one episode (or any run of steps whose last step is a release).

        Args:
            features: ``[T, F]`` per-step features.
            released: ``[T]`` bool, ``info["released"][sparse_channel]`` of each step.
            emitted_sparse: ``[T]`` the sparse channel as emitted by the wrapper (0 except on release steps,
                where it is the segment's released sum).
            true_sparse: ``[T]`` the true per-step sparse reward (diagnostics).
            terminated: for a whole episode, whether it ended by termination (True) or truncation (False): its
                last step is flagged :data:`EPISODE_FINAL` (and :data:`TERMINATED`). ``None``: the steps are
                not known to end an episode and no step is flagged.
            next_obs: ``[T, obs_dim]`` the observation each step led to; required by a store that keeps them
                (:attr:`has_next_obs`), refused by one that does not (it would be silently dropped).

        Returns:
            The number of segments added.

        A segment closes on every step with ``released`` true, so with ``p_rel > 0`` one episode yields several
        segments. The wrapper always releases on the final (terminated or truncated) step, so a well-formed
        episode ends with a release; steps after the last release have no target and are rejected.
        """
        feats = torch.as_tensor(features, dtype=torch.float32).reshape(-1, self.feature_dim)
        rel = torch.as_tensor(released, dtype=torch.bool).reshape(-1)
        emitted = torch.as_tensor(emitted_sparse, dtype=torch.float32).reshape(-1)
        truth = torch.as_tensor(true_sparse, dtype=torch.float32).reshape(-1)
        t = feats.shape[0]
        if not (rel.shape[0] == emitted.shape[0] == truth.shape[0] == t):
            raise ValueError(
                f"add_episode: length mismatch features={t} released={rel.shape[0]} "
                f"emitted={emitted.shape[0]} true={truth.shape[0]}"
            )
        if t == 0:
            return 0
        if not bool(rel[-1]):
            raise ValueError("add_episode: the last step must release the sparse channel (segment left open)")
        if (next_obs is None) == self.has_next_obs:
            raise ValueError(
                "add_episode: this store keeps next observations, pass next_obs"
                if self.has_next_obs
                else "add_episode: this store keeps no next observations (make it with next_obs=True)"
            )
        if next_obs is not None:
            next_o = torch.as_tensor(next_obs, dtype=torch.float32).reshape(-1, self.obs_dim)
            if next_o.shape[0] != t:
                raise ValueError(f"add_episode: length mismatch features={t} next_obs={next_o.shape[0]}")

        ends = torch.nonzero(rel).reshape(-1)  # index of the closing step of each segment
        n_new = int(ends.shape[0])
        # Segment id of each step = number of releases strictly before it. A step that releases belongs to
        # the segment it closes, hence the exclusive cumulative count.
        local_seg = torch.cumsum(rel.long(), 0) - rel.long()

        n0, s0 = self._n, self._s
        self._features = self._grow(self._features, n0 + t)
        self._segment_index = self._grow(self._segment_index, n0 + t)
        self._true_sparse = self._grow(self._true_sparse, n0 + t)
        self._step_flags = self._grow(self._step_flags, n0 + t)
        if self._next_obs is not None:
            self._next_obs = self._grow(self._next_obs, n0 + t)
            self._next_obs[n0 : n0 + t] = next_o
        self._targets = self._grow(self._targets, s0 + n_new)
        self._offsets = self._grow(self._offsets, s0 + n_new + 1)

        self._features[n0 : n0 + t] = feats
        self._segment_index[n0 : n0 + t] = local_seg + s0
        self._true_sparse[n0 : n0 + t] = truth
        self._step_flags[n0 : n0 + t] = 0
        if terminated is not None:
            self._step_flags[n0 + t - 1] = EPISODE_FINAL | (TERMINATED if terminated else 0)
        self._targets[s0 : s0 + n_new] = emitted[ends]
        self._offsets[s0 + 1 : s0 + n_new + 1] = ends + 1 + n0
        self._n += t
        self._s += n_new
        self.num_episodes += 1
        return n_new

    def extend(self, other: SegmentStore) -> None:
        """Append all segments of another store with the same layout (step flags kept; its collection marks
        are not carried over: mark a collection on this store with :meth:`begin_collection`)."""
        if (other.obs_dim, other.act_dim, other.n_dense, other.has_next_obs) != (
            self.obs_dim, self.act_dim, self.n_dense, self.has_next_obs
        ):  # fmt: skip
            raise ValueError("extend: stores have different feature layouts")
        if len(other) == 0:
            return
        released = torch.zeros(len(other), dtype=torch.bool)
        released[other.segment_offsets[1:] - 1] = True
        emitted = torch.zeros(len(other))
        emitted[other.segment_offsets[1:] - 1] = other.targets
        episodes = self.num_episodes + other.num_episodes
        n0 = self._n
        next_obs = other.next_obs if other.has_next_obs else None
        self.add_episode(other.features, released, emitted, other.true_sparse, next_obs=next_obs)
        self._step_flags[n0 : self._n] = other.step_flags
        self.num_episodes = episodes

    # ---- persistence ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Tensor | int]:
        """Plain tensors and ints only, so ``torch.load(..., weights_only=True)`` can read it. A store without
        next observations is written in format 2, exactly as before they existed."""
        state: dict[str, Tensor | int] = {
            "version": _FORMAT_VERSION if self.has_next_obs else _FORMAT_WITHOUT_NEXT_OBS,
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "n_dense": self.n_dense,
            "num_episodes": self.num_episodes,
            "features": self.features.clone(),
            "segment_index": self.segment_index.clone(),
            "true_sparse": self.true_sparse.clone(),
            "step_flags": self.step_flags.clone(),
            "targets": self.targets.clone(),
            "segment_offsets": self.segment_offsets.clone(),
            "collection_starts": torch.tensor(self.collection_starts, dtype=torch.long),
        }
        if self.has_next_obs:
            state["next_obs"] = self.next_obs.clone()
        return state

    @classmethod
    def from_state_dict(cls, state: dict[str, Tensor | int]) -> SegmentStore:
        if state.get("version") not in (1, 2, _FORMAT_VERSION):
            raise ValueError(f"SegmentStore: unsupported format version {state.get('version')!r}")
        store = cls(int(state["obs_dim"]), int(state["act_dim"]), int(state["n_dense"]), capacity=1)
        n, s = int(state["features"].shape[0]), int(state["targets"].shape[0])
        store._features = state["features"].to(torch.float32).clone()
        store._segment_index = state["segment_index"].to(torch.long).clone()
        store._true_sparse = state["true_sparse"].to(torch.float32).clone()
        flags = state.get("step_flags")
        store._step_flags = (
            flags.to(torch.uint8).clone() if flags is not None else torch.zeros(n, dtype=torch.uint8)
        )
        store.collection_starts = [int(c) for c in state.get("collection_starts", torch.zeros(0)).tolist()]
        next_obs = state.get("next_obs")  # (versions 1–2, and any store collected without them: none)
        store._next_obs = None if next_obs is None else next_obs.to(torch.float32).clone()
        store._targets = state["targets"].to(torch.float32).clone()
        store._offsets = state["segment_offsets"].to(torch.long).clone()
        store._n, store._s = n, s
        store.num_episodes = int(state["num_episodes"])
        return store

    def save(self, path: str | Path) -> None:
        """Write the store with ``torch.save`` (plain tensors; loads with ``weights_only=True``)."""
        torch.save(self.state_dict(), Path(path))

    @classmethod
    def load(cls, path: str | Path) -> SegmentStore:
        return cls.from_state_dict(torch.load(Path(path), weights_only=True))
