"""A second, independent RL trainer (GRU policy, left-padded position-aligned batches, clipped-IS
REINFORCE) and its rlbisect adapter: the generality proof of the invariant checks."""
