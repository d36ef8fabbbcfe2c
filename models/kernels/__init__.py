"""Compute kernels under the adapters: fused MoE experts (`fused_moe`, Triton on CUDA) and the blocked
vocabulary-sized matmuls of a denoising step (`logits_blocks`)."""
