"""Models: loading Hugging Face causal LMs and tokenizers (loading), critic and reward models with a value head
(value_head, head_check), LoRA through peft (lora, merge_lora), the shared forward passes (forward), and the
tiny-model factory with its byte-level tokenizer (tiny, tokenizer).

Nothing is imported here: each module pulls in torch, transformers or peft only when it is used.
"""
