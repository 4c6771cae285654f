"""The vocabulary of an experiment grid: envs, methods, arms, ratios, presets and their cells.

A *preset* names envs × arms × seeds plus the overrides every run gets; a *cell* is one (env, arm, seed) of it
and a run folder ``<out>/<env>/<arm>/seed<k>``. Arms whose runs another results folder already holds are
*joined* (:class:`JoinedArms`): the report reads them as cells of its own, labelled with where they come from,
and the runner never runs them ("run nothing twice").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (``conf/`` and the default ``runs/`` and ``docs/results/`` folders live there)."""
CONF = ROOT / "conf"

ENV_FILES = {
    "hopper": "mo-hopper-v5",
    "walker": "mo-walker2d-v5",
    "halfcheetah": "mo-halfcheetah-v5",
    "swimmer": "mo-swimmer-v5",
}
"""Grid env name (``conf/<name>.yaml``) -> the env id it runs."""

HEALTHY_BONUS_ENVS = frozenset({"hopper", "walker"})
"""Grid envs whose every objective adds a healthy bonus of 1 per step alive (gymnasium's ``healthy_reward``), so
that an undiscounted return minus the episode length is the objective net of survival. Halfcheetah and swimmer
have no bonus and never terminate: there the difference would only subtract 1000 from every return."""

METHODS = {
    "oracle": ("method/oracle.yaml", "Oracle"),
    "baseline": ("method/baseline.yaml", "Baseline"),
    "prism": ("method/prism.yaml", "PRISM"),
    "wo_residual": ("ablation/wo_residual.yaml", "w/o residual"),
    "wo_dense": ("ablation/wo_dense.yaml", "w/o dense rewards"),
    "wo_ensemble": ("ablation/wo_ensemble.yaml", "w/o ensemble"),
    "wo_refinement": ("ablation/wo_refinement.yaml", "w/o refinement"),
    "wo_loss": ("ablation/wo_loss.yaml", "w/o loss"),
    "uniform": ("ablation/uniform.yaml", "uniform"),
    "random": ("ablation/random.yaml", "random"),
    "rrd": ("method/rrd.yaml", "RRD"),
}
"""Method name -> (overlay file under ``conf/``, the paper's column header in its main / ablation tables; RRD, a
peer of ours, has no column there, so its paper cells are empty)."""

LEARNED_REWARD_METHODS = frozenset(
    ("prism", "wo_residual", "wo_dense", "wo_ensemble", "wo_refinement", "wo_loss", "rrd")
)
"""The methods that fit a reward model, ReSymNet or RRD (their runs' ``summary.json`` carry ``reward_fits`` with
a model's scores)."""

METRICS = ("hv", "eum", "vo")

BACKBONES = ("capql", "gpi_pd")
"""Backbones a grid can run (``conf/agent/<name>.yaml``); the paper reports CAPQL in its main and ablation
tables and GPI-PD in its appendix table."""


PAPER_SPARSE_CHANNEL = {"control_cost": ("-1",)}
"""``env.sparse_channel`` of the paper's tables where it is not the forward channel (``null`` or ``0``)."""


@dataclass(frozen=True)
class Arm:
    """One column of a grid: a method overlay (a key of :data:`METHODS`) run under a protocol, plus overrides.

    A plain method is the arm of the same name with the grid's protocol; a preset may define arms of its own
    (e.g. the same method under both protocols) that pin their protocol."""

    name: str
    """The arm's folder name and report label."""
    method: str
    """The method overlay (and the paper's column it is compared with)."""
    protocol: str | None = None
    """``equal`` or ``released``; None takes the grid's ``--protocol``."""
    overrides: tuple[str, ...] = ()
    """prism overrides of this arm only (after the preset's)."""
    per_seed: bool = False
    """Run this arm one process per seed even where the grid runs populations: for an arm whose population
    would outlast the machine's session (checkpoints do not survive a session; finished seeds' files do)."""
    seeds: tuple[int, ...] | None = None
    """The seeds of this arm (None: the grid's); e.g. one seed of a sensitivity check beside a 5-seed arm."""


@dataclass(frozen=True)
class Ratio:
    """A row of the ratio table: final metric of arm ``numerator`` over that of arm ``denominator``."""

    numerator: str
    denominator: str
    label: str = ""
    """What the ratio measures (e.g. "budget: oracle 25k → 50k"); empty for a plain method comparison."""
    primary: bool = False
    """A primary comparison of the preset: its HV rows (one per env that runs both arms) join the preset's
    family, Holm-adjusted together, and only they may say "beats" (:mod:`prism.experiments.inference`).
    Every other row is exploratory, its Welch p uncorrected."""


@dataclass(frozen=True)
class JoinedArms:
    """Arms of one env whose run files live in another results folder: read as this preset's cells (seed
    folders ``<runs>/<env>/<arm>/seed<k>``), labelled ``label`` in the report, and never run."""

    env: str
    arms: tuple[str, ...]
    runs: str
    """The other grid's folder: relative to the repository root (a committed ``docs/results/<preset>/runs``)
    or absolute."""
    label: str
    """Where the runs come from, as the report says it (e.g. the other preset's name)."""
    renamed: tuple[tuple[str, str], ...] = ()
    """(arm here, its name there) for an arm read from a folder of another name (e.g. ``("a-prism",
    "e-prism-fast")``: a reused run must have the config this grid would give it, apart from labels —
    tests/test_ablation_study.py checks that); an arm not listed has the same name in both grids."""

    cycle_end: int = 0
    """Read each run's ``cycle_end`` row of this cycle (1 = the end of cycle 1, a run with
    ``eval.final.each_cycle``) as its final evaluation, and its periodic rows up to that step as its curve;
    0 reads the run's own final row. E.g. the released protocol's oracle at M steps, read from an oracle run
    over 2 × M in this grid's own folder."""
    seeds: tuple[int, ...] = ()
    """The seeds read from the other grid (empty: this grid's seeds for the arm). E.g. an oracle that the other
    study ran with more seeds than this one runs: its report's numbers are those seeds', and so are these."""

    def source_arm(self, arm: str) -> str:
        """The folder name of this grid's ``arm`` in the other grid."""
        return dict(self.renamed).get(arm, arm)

    def folder(self) -> Path:
        path = Path(self.runs)
        return path if path.is_absolute() else ROOT / path


@dataclass(frozen=True)
class Aggregate:
    """The report's cross-env aggregate (rliable, :mod:`prism.experiments.stats`): final HV normalised by the
    mean final HV of arm ``normaliser`` in the same env, IQM per arm, and P(X > Y) for each pair."""

    normaliser: str
    arms: tuple[str, ...]
    improvements: tuple[tuple[str, str], ...]
    """(X, Y) pairs: the probability of improvement P(X > Y) is reported for each."""
    envs: tuple[str, ...] = ()
    """The envs it may use (empty: the preset's); of those, it uses the ones where every arm has ≥ 2 runs."""
    name: str = ""
    """"" for the preset's main aggregate (``aggregate.csv``, ``aggregate.png``); a further aggregate over the
    envs some arm ran in (e.g. ``rrd``) writes ``aggregate_<name>.csv`` and ``aggregate_<name>.png``."""

    @property
    def file_stem(self) -> str:
        return f"aggregate_{self.name}" if self.name else "aggregate"


@dataclass(frozen=True)
class TakeOff:
    """The report's take-off count: per arm of ``env``, the seeds whose final evaluation's mean undiscounted
    ``objective`` return (over its policies) exceeds ``threshold``; also counted for the same arms' runs in
    ``reference_runs`` (another study's folder, e.g. the same env at a smaller budget), labelled
    ``reference_label``. Its learning curves (that return along the periodic evaluations) are drawn beside."""

    env: str
    objective: str
    threshold: float
    reference_runs: str = ""
    """Relative to the repository root or absolute; "" = no reference count."""
    reference_label: str = ""

    def reference_folder(self) -> Path | None:
        if not self.reference_runs:
            return None
        path = Path(self.reference_runs)
        return path if path.is_absolute() else ROOT / path


@dataclass(frozen=True)
class PaperClaim:
    """A sentence of the paper that the report judges from its own ratio rows
    (:mod:`prism.experiments.paper_claims`): each (numerator, denominator) of ``ratios`` must be one of the
    preset's :class:`Ratio` rows, read in every env that runs both arms (or those of ``envs``) and each metric
    of ``metrics``."""

    quote: str
    """The paper's words, as quoted."""
    ratios: tuple[tuple[str, str], ...]
    expect: str
    """What the sentence says of numerator against denominator: ``lower``, ``higher`` or ``equal`` (within the
    preset's equivalence margin)."""
    metrics: tuple[str, ...] = ("hv",)
    note: str = ""
    """What the judgement leaves out (e.g. a size the words give, such as "moderately")."""
    envs: tuple[str, ...] = ()
    """The study's envs (``hopper``) whose rows carry the claim; empty: every env that runs both arms (a
    sentence about one env's row of the paper's table names it)."""


@dataclass(frozen=True)
class CostGate:
    """A bound on what an arm's seeds cost: the median CPU time of ``arm``'s seeds in ``env`` over that of
    ``reference``'s must be at most ``max_ratio`` (the report says whether it holds; :mod:`prism.experiments.costs`)."""

    env: str
    arm: str
    reference: str
    max_ratio: float


@dataclass(frozen=True)
class SweepSeries:
    """One line of a sweep's figure: the arm that ran each level of the swept key."""

    label: str
    """The line's name in the figure and tables (e.g. "baseline")."""
    arms: tuple[tuple[float, str], ...]
    """(level, arm) pairs in the x axis' order; an env that does not run an arm has no point at its level."""
    versus: str = ""
    """The arm each level's arm is judged against, by its ratio row (which the study must declare): e.g. the
    dense oracle (a drop) or the series' own arm at the reference level (robustness; that level itself has no
    row). "" judges nothing."""
    band: tuple[float, float] | None = None
    """A range of arm / ``versus`` a claim gives (a 20–40 % drop: ``[0.6, 0.8]``): each HV row says whether its
    Welch–Fieller interval lies inside it, outside it, or overlaps it. None: no band."""


@dataclass(frozen=True)
class Sweep:
    """A metric against a swept config key (:mod:`prism.experiments.sweeps`): per env, each series' mean final
    value with its 95 % t interval at each level beside a ``reference`` arm's band; the HV ratio of each level's
    arm to the series' ``versus`` arm (the study's own ratio row: its interval, TOST p and verdict, and where the
    level lies against a ``band``); and, for arms that fit a reward model, the segment store at each level
    (segments per episode) with the fit's per-step Pearson on held-out segments."""

    key: str
    """The swept prism config key (e.g. ``env.p_rel``): an arm whose overrides set it must set it to its
    level."""
    series: tuple[SweepSeries, ...]
    reference: str = ""
    """An arm drawn across every level as a line with its 95 % band (e.g. the dense oracle); "" none."""
    metrics: tuple[str, ...] = ("hv", "eum")
    """The figure's rows and the level table's columns (of :data:`METRICS`)."""
    name: str = ""
    """"" for the study's first sweep (``sweep.png``, ``sweep.csv``); another is ``sweep_<name>.*``."""

    @property
    def file_stem(self) -> str:
        return f"sweep_{self.name}" if self.name else "sweep"

    def arms(self) -> tuple[str, ...]:
        """Every arm the sweep reads: each series' levels, its ``versus``, and the reference."""
        named = [arm for s in self.series for _, arm in s.arms] + [s.versus for s in self.series]
        return tuple(dict.fromkeys(a for a in (*named, self.reference) if a))


@dataclass(frozen=True)
class Cell:
    """One run of a grid: (env, arm, seed); ``source`` is the folder of a joined arm's grid (None: this one's)."""

    env: str
    method: str
    seed: int
    source: Path | None = None
    source_method: str | None = None
    """The arm's folder name in ``source`` when it differs from ``method`` (a reused arm, :class:`JoinedArms`)."""
    cycle_end: int = 0
    """Read the run at the end of this cycle (:attr:`JoinedArms.cycle_end`); 0: at its end."""

    def run_dir(self, out: Path) -> Path:
        return (self.source or out) / self.env / (self.source_method or self.method) / f"seed{self.seed}"


@dataclass(frozen=True)
class Preset:
    """A named grid: envs × arms × seeds with the overrides every run gets, and what its report compares."""

    envs: tuple[str, ...]
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    overrides: tuple[str, ...]
    description: str
    env_overrides: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Per-env additions to ``overrides`` (e.g. smaller collections where episodes are 1000 steps long)."""
    backbone: str = "capql"
    """The agent (``conf/agent/<backbone>.yaml`` is added after the method overlay)."""
    protocol: str = "equal"
    """The protocol of every arm that does not pin its own (``--protocol`` sets it)."""
    arms: tuple[Arm, ...] = ()
    """Arms of this preset beyond the plain methods (``methods`` may name them)."""
    ratios: tuple[Ratio, ...] = ()
    """The ratio table's rows; empty = PRISM / baseline and PRISM / oracle where both arms are in the grid."""
    env_methods: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Per env, the arms run there when they differ from ``methods`` (``methods`` then lists them all)."""
    joined: tuple[JoinedArms, ...] = ()
    """Arms of an env read from another grid's folder (they must be among that env's arms)."""
    aggregate: Aggregate | None = None
    """The cross-env rliable aggregate of the report (None: none)."""
    more_aggregates: tuple[Aggregate, ...] = ()
    """Further named aggregates, each over its own arms and envs (e.g. a peer arm run in only some envs)."""
    take_off: TakeOff | None = None
    """The report's take-off count and objective curves (None: none)."""
    paper_tables: tuple[str, ...] = ()
    """The paper's tables the report compares with (``paper_results.csv``'s ``table`` column); empty: the
    backbone's main and ablation tables."""
    cost_table: bool = False
    """The report has a table of each arm's CPU time per seed and phase (:mod:`prism.experiments.costs`)."""
    cost_gates: tuple[CostGate, ...] = ()
    """Bounds on arms' CPU time, each judged in the cost table."""
    primary_envs: tuple[str, ...] = ()
    """The envs whose rows of primary ratios form the family (empty: all). A preset that joins other studies'
    envs only for its aggregate leaves their rows to those studies' own families."""
    paper_claims: tuple[PaperClaim, ...] = ()
    """Sentences of the paper the report quotes and judges from its ratio rows."""
    equivalence_margin: float = 0.05
    """m of the report's equivalence test: a ratio row "ties" only where TOST rejects, at 5 %, that the ratio
    of means lies outside [1 − m, 1 + m]."""
    sweeps: tuple[Sweep, ...] = ()
    """Metrics against a swept config key (:class:`Sweep`): the report's first section, with its figure."""

    def aggregates(self) -> tuple[Aggregate, ...]:
        """The report's aggregates: the main one (if any), then the named ones."""
        return ((self.aggregate,) if self.aggregate else ()) + self.more_aggregates

    def methods_for(self, env: str) -> tuple[str, ...]:
        """The arms of ``env``: its own list where ``env_methods`` has one, else ``methods``; only those also
        in ``methods`` (so ``--methods`` narrows every env)."""
        own = dict(self.env_methods).get(env)
        return self.methods if own is None else tuple(m for m in own if m in self.methods)

    def joined_source(self, env: str, arm: str) -> JoinedArms | None:
        """The :class:`JoinedArms` entry that ``env``'s ``arm`` is read from (None: this grid runs it)."""
        return next((j for j in self.joined if j.env == env and arm in j.arms), None)

    def cells(self) -> list[Cell]:
        """Every (env, arm, seed) of the grid, seed-major; an arm with its own seeds keeps only those of the
        grid's seeds it names; a joined arm's cells point at its own grid's folder, with its entry's seeds when
        it names some."""
        cells = []
        joined_only = sorted({s for j in self.joined for s in j.seeds} - set(self.seeds))
        for s in (*self.seeds, *joined_only):
            for e in self.envs:
                for m in self.methods_for(e):
                    join = self.joined_source(e, m)
                    if join and join.seeds:
                        if s not in join.seeds:
                            continue
                    elif s not in self.seeds or (
                        self.arm(m).seeds is not None and s not in self.arm(m).seeds
                    ):
                        continue
                    source = join.source_arm(m) if join else None
                    cells.append(
                        Cell(
                            e,
                            m,
                            s,
                            join.folder() if join else None,
                            source if source != m else None,
                            join.cycle_end if join else 0,
                        )
                    )
        return cells

    def overrides_for(self, env: str) -> tuple[str, ...]:
        return self.overrides + dict(self.env_overrides).get(env, ())

    def arm(self, name: str) -> Arm:
        """The arm called ``name``: one of this preset's own, or the plain method of that name."""
        for arm in self.arms:
            if arm.name == name:
                return arm
        return Arm(name, name)

    def protocol_of(self, name: str) -> str:
        return self.arm(name).protocol or self.protocol

    def value_set(self, name: str, key: str, env: str | None = None) -> str | None:
        """The value the study's overrides (common, ``env``'s own when given, then arm ``name``'s) give
        ``key``, the last one winning as in the run's config (None: unset)."""
        value = None
        for item in (*(self.overrides_for(env) if env else self.overrides), *self.arm(name).overrides):
            found, _, text = item.partition("=")
            if found.strip() == key:
                value = text.strip()
        return value

    def paper_counterpart(self, env: str, name: str) -> bool:
        """Whether the paper's tables hold arm ``name``'s counterpart in ``env`` (its method's column): always
        for the oracle, which learns from the dense reward whichever channel the others see sparse; for
        another method only while the task is that of the tables read (:attr:`paper_tables`): the same
        channel sparse (the forward one, or the control cost for ``control_cost``) released at the episode's
        end only (``env.p_rel`` = 0). A run on another task gets no paper value, so none is read as its
        reference."""
        arm = self.arm(name)
        if arm.method == "oracle":
            return True
        channel = (self.value_set(name, "env.sparse_channel", env) or "null").lower()
        papers = PAPER_SPARSE_CHANNEL.get(self.paper_tables[0] if self.paper_tables else "", ("null", "0"))
        try:
            released = float(self.value_set(name, "env.p_rel", env) or "0") != 0
        except ValueError:
            released = True
        return channel in papers and not released

    def ratio_rows(self) -> tuple[Ratio, ...]:
        if self.ratios:
            return self.ratios
        # A plain grid's question is the paper's: does PRISM beat the sparse baseline? (the primary family)
        return tuple(
            Ratio("prism", other, primary=other == "baseline")
            for other in ("baseline", "oracle")
            if {"prism", other} <= set(self.methods)
        )
