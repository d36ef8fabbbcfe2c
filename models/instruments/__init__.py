"""Measurements taken on a model while it decodes: MoE experts touched per forward kind (`expert_counter`)."""
