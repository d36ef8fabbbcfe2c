"""The contract at the bottom of the project: records, prompts, the decoder and adapter protocols, paths.

Every other package (samplers, models, evals, harness, bench) may import it; it imports none of them.
"""
