"""The registry of environment specs: the paper's four MuJoCo tasks and the toy env, plus any a user adds
with :func:`register_env_spec`."""

from __future__ import annotations

from prism.envs.spec import EnvSpec, SpecError
from prism.envs.toy import TOY_ENV_ID

REGISTRY: dict[str, EnvSpec] = {}


def register_env_spec(spec: EnvSpec, *, overwrite: bool = False) -> EnvSpec:
    """Add ``spec`` to the registry under ``spec.id``."""
    if spec.id in REGISTRY and not overwrite:
        raise SpecError(f"env.id: a spec for {spec.id!r} is already registered")
    REGISTRY[spec.id] = spec
    return spec


def get_env_spec(env_id: str) -> EnvSpec:
    """The registered spec for ``env_id``; an unknown id is a :class:`SpecError` listing the known ones."""
    try:
        return REGISTRY[env_id]
    except KeyError:
        raise SpecError(
            f"env.id: unknown env {env_id!r} (registered: {', '.join(sorted(REGISTRY))})"
        ) from None


def registered_env_ids() -> list[str]:
    return sorted(REGISTRY)


# ---- the paper's four MuJoCo tasks (docs/method.md §2 and the paper's appendix tables; λ from docs/method.md §7) ---------
# Which parts of these tables are exact simulator symmetries and which are heuristic is checked against the
# MuJoCo models in tests/test_symmetry_physics.py and written up in docs/symmetry.md. The values are the
# paper's and stay as they are; the comments say what physics makes of them.

# mo-hopper-v5, obs = qpos[1:] ++ qvel = (z, torso angle, thigh, leg, foot angles, vx, vz, torso spin,
# thigh, leg, foot angular velocities). L_g negates the three joints' angles and velocities and keeps the torso.
# HEURISTIC: not a simulator symmetry. Thigh and leg bend one way only ([-150°, 0]), so L_g maps legal states
# outside the joint limits, and even with the limits off (and in flight) one step misses the mirrored next
# state by ~0.7 of the step's size. No reflection of the x-z world keeps vx and gravity.
register_env_spec(
    EnvSpec(
        id="mo-hopper-v5",
        objective_names=("forward", "jump", "energy"),
        obs_dim=11,
        act_dim=3,
        sparse_channel=0,
        symmetric_obs=(2, 3, 4, 8, 9, 10),
        asymmetric_obs=(0, 1, 5, 6, 7),
        symmetric_act=(0, 1, 2),
        ref_point=(-100.0, -100.0, -100.0),
        symreg_lambda=0.01,
    )
)
# mo-walker2d-v5, obs = qpos[1:] ++ qvel = (z, torso angle, right thigh/leg/foot, left thigh/leg/foot angles,
# vx, vz, torso spin, right then left joint angular velocities). L_g negates all six joints, keeps the torso.
# HEURISTIC, for the same reasons as the hopper (one-sided knee/thigh limits; ~0.7 of a step off in flight).
# The walker's EXACT symmetry is the left/right leg swap (obs 2-4 <-> 5-7, 11-13 <-> 14-16, actions 0-2 <-> 3-5,
# to round-off even through ground contacts), a permutation that this ±1 diagonal table cannot express.
register_env_spec(
    EnvSpec(
        id="mo-walker2d-v5",
        objective_names=("forward", "energy"),
        obs_dim=17,
        act_dim=6,
        sparse_channel=0,
        symmetric_obs=(2, 3, 4, 5, 6, 7, 11, 12, 13, 14, 15, 16),
        asymmetric_obs=(0, 1, 8, 9, 10),
        symmetric_act=tuple(range(6)),
        ref_point=(-100.0, -100.0),
        symreg_lambda=1.0,
    )
)
# mo-halfcheetah-v5, obs = qpos[1:] ++ qvel = (z, torso angle, back thigh/shin/foot, front thigh/shin/foot
# angles, vx, vz, torso spin, the six joint angular velocities). L_g negates all six joints, keeps the torso.
# HEURISTIC: the front and back legs differ (geometry, gears, springs), four of the six joint ranges are not
# symmetric about 0, and one step in flight misses the mirrored next state by ~0.2 of the step's size.
register_env_spec(
    EnvSpec(
        id="mo-halfcheetah-v5",
        objective_names=("forward", "energy"),
        obs_dim=17,
        act_dim=6,
        sparse_channel=0,
        symmetric_obs=(2, 3, 4, 5, 6, 7, 11, 12, 13, 14, 15, 16),
        asymmetric_obs=(0, 1, 8, 9, 10),
        symmetric_act=tuple(range(6)),
        ref_point=(-100.0, -100.0),
        symreg_lambda=0.01,
        pitch_obs=1,  # the torso angle: a cheetah on its back has cos < 0 (flags seeds stalled upside down)
    )
)
# mo-swimmer-v5, obs = qpos[2:] ++ qvel = (tip angle, rotor 1, rotor 2 angles, vx, vy, tip angular velocity,
# rotor 1, rotor 2 angular velocities). The reflection y -> -y across the swimming direction is an EXACT
# simulator symmetry (bit-for-bit, rewards included): it negates obs 0,1,2,4,5,6,7 and keeps obs 3 (vx).
# The paper's L_g keeps obs 0 and 5 as well, so it is NOT a simulator symmetry: it is exact only at states with
# zero tip angle and spin, and even there it gets the sign of the next tip angle and spin wrong.
register_env_spec(
    EnvSpec(
        id="mo-swimmer-v5",
        objective_names=("forward", "energy"),
        obs_dim=8,
        act_dim=2,
        sparse_channel=0,
        symmetric_obs=(1, 2, 4, 6, 7),
        asymmetric_obs=(0, 3, 5),
        symmetric_act=(0, 1),
        ref_point=(-100.0, -100.0),
        symreg_lambda=0.005,
    )
)

TOY_SPEC = register_env_spec(
    EnvSpec(
        id=TOY_ENV_ID,
        objective_names=("outward", "energy"),
        obs_dim=6,
        act_dim=2,
        sparse_channel=0,
        symmetric_obs=(2, 3, 4, 5),
        asymmetric_obs=(0, 1),
        symmetric_act=(0, 1),
        ref_point=(-100.0, -100.0),
        symreg_lambda=0.01,
        max_episode_steps=200,
    ),
    overwrite=True,
)
