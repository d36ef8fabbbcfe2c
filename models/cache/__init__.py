"""KV caches the adapters decode on: per-row slots of one cache (`slot_cache`, read in place by `slot_attention`),
the masked family's growable row buffers (`row_cache`), and transformers' own cache for the reference mode
(`reference_context`)."""
