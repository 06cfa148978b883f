//! Switchboard's built-in agent.
//!
//! It owns the agent loop ([`BuiltinAgent`], a [`switchboard_engine::Backend`]), the
//! workspace tools it offers the model, and the LLM providers it talks to:
//! [`openai::OpenAiProvider`] for any server with the OpenAI chat completions wire format
//! (OpenAI, OpenRouter, Ollama, vLLM, llama.cpp, LM Studio …) and
//! [`anthropic::AnthropicProvider`] for the Anthropic Messages API. The tools decide nothing
//! about permissions: the engine's approval gate does. It does not know about HTTP servers,
//! stores or chat platforms.

mod agent;
pub mod anthropic;
pub mod local;
mod mcp;
pub mod openai;
pub mod provider;
mod recall;
mod sse;
pub mod tools;

pub use agent::{AgentConfig, BuiltinAgent, EARLIER_LEFT_OUT, ProviderSlot};
pub use anthropic::{AnthropicConfig, AnthropicProvider};
pub use openai::{OpenAiConfig, OpenAiProvider};
pub use provider::{
    ChatMessage, ChatRole, Completion, ImagePart, Provider, ProviderError, StreamedToolCall,
    TextSink, ToolSpec,
};
