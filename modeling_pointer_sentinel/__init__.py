"""Pointer Sentinel-LSTM (Merity et al., 2016) as a Hugging Face model. Importing registers it with the Auto classes."""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

from .configuration_pointer_sentinel import PointerSentinelConfig
from .generation_pointer_sentinel import PointerSentinelCache, PointerSentinelLogitsProcessor, PointerStash
from .modeling_pointer_sentinel import (
    PointerSentinelCausalLMOutput,
    PointerSentinelForCausalLM,
    PointerSentinelModel,
    PointerSentinelModelOutput,
    PointerSentinelPreTrainedModel,
    pointer_mixture,
    pointer_target_log_prob,
)
from .tokenization_pointer_sentinel import PointerSentinelTokenizer

AutoConfig.register(PointerSentinelConfig.model_type, PointerSentinelConfig, exist_ok=True)
AutoModel.register(PointerSentinelConfig, PointerSentinelModel, exist_ok=True)
AutoModelForCausalLM.register(PointerSentinelConfig, PointerSentinelForCausalLM, exist_ok=True)
# save_pretrained then copies the code files beside the weights, so trust_remote_code loads without this package.
PointerSentinelConfig.register_for_auto_class()
PointerSentinelModel.register_for_auto_class("AutoModel")
PointerSentinelForCausalLM.register_for_auto_class("AutoModelForCausalLM")
# The open-vocabulary tokenizer: found by its name in tokenizer_config.json (a folder whose tokenizer names another
# class keeps that one), and saved with its code and auto_map.
AutoTokenizer.register(PointerSentinelConfig, fast_tokenizer_class=PointerSentinelTokenizer, exist_ok=True)
PointerSentinelTokenizer.register_for_auto_class("AutoTokenizer")

__version__ = "0.1.0"

__all__ = [
    "PointerSentinelCache",
    "PointerSentinelCausalLMOutput",
    "PointerSentinelConfig",
    "PointerSentinelForCausalLM",
    "PointerSentinelLogitsProcessor",
    "PointerSentinelModel",
    "PointerSentinelModelOutput",
    "PointerSentinelPreTrainedModel",
    "PointerSentinelTokenizer",
    "PointerStash",
    "pointer_mixture",
    "pointer_target_log_prob",
]
