"""The learned reward models prism ships, each a peer registered by name (:mod:`prism.plugins`): ReSymNet
(:mod:`~prism.reward.models.resymnet`, the paper's) and RRD (:mod:`~prism.reward.models.rrd`), with the
stacked layers they share (:mod:`~prism.reward.models.batched`). A further model is added from outside prism
(docs/add_a_reward_model.md)."""
