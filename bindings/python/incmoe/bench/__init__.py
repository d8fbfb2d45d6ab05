"""Benchmarks that need more than the C tools: python -m incmoe.bench.prefill
(time to first token of an expert-parallel Hugging Face MoE model, the AgRs
baseline against incmoe)."""
