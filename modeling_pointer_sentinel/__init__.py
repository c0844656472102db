"""Pointer Sentinel-LSTM (Merity et al., 2016) as a Hugging Face model. Importing registers it with the Auto classes."""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .configuration_pointer_sentinel import PointerSentinelConfig
from .generation_pointer_sentinel import PointerSentinelLogitsProcessor, PointerStash
from .modeling_pointer_sentinel import (
    PointerSentinelCache,
    PointerSentinelCausalLMOutput,
    PointerSentinelForCausalLM,
    PointerSentinelModel,
    PointerSentinelModelOutput,
    PointerSentinelPreTrainedModel,
    pointer_mixture,
    pointer_target_log_prob,
)

AutoConfig.register(PointerSentinelConfig.model_type, PointerSentinelConfig, exist_ok=True)
AutoModel.register(PointerSentinelConfig, PointerSentinelModel, exist_ok=True)
AutoModelForCausalLM.register(PointerSentinelConfig, PointerSentinelForCausalLM, exist_ok=True)
# save_pretrained then copies the code files beside the weights, so trust_remote_code loads without this package.
PointerSentinelConfig.register_for_auto_class()
PointerSentinelModel.register_for_auto_class("AutoModel")
PointerSentinelForCausalLM.register_for_auto_class("AutoModelForCausalLM")

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
    "PointerStash",
    "pointer_mixture",
    "pointer_target_log_prob",
]
