"""The learned reward models prism ships, each a peer registered by name (:mod:`prism.plugins`): ReSymNet
(:mod:`~prism.reward.models.resymnet`, the paper's; its fit in :mod:`~prism.reward.models.resymnet_fit`) and RRD
(:mod:`~prism.reward.models.rrd`), built of prism's stacked linear layer (:mod:`prism.core.stacked_linear`) and
ReSymNet's stacked LayerNorm (:mod:`~prism.reward.models.batched`). A further model is added from outside prism
(docs/add_a_reward_model.md)."""
