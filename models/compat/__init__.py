"""Compatibility shims for hub remote code written for other library versions: 4.x classes fitted to
transformers 5 (`remote_compat`) and an opt-in pure-torch stand-in for the two flash_attn functions SDAR calls
(`flash_attn_torch`)."""
