"""Loading a checkpoint the way its family needs: remote code with repaired buffers or a refusal (`remote_load`),
the torch-free checks of a masked model's decode layout (`masked_checks`), and LoRA adapters merged on load
(`lora`)."""
