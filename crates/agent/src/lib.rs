//! Switchboard's built-in agent.
//!
//! It owns the agent loop ([`BuiltinAgent`], a [`switchboard_engine::Backend`]) and the LLM
//! providers it talks to: [`openai::OpenAiProvider`] for any server with the OpenAI chat
//! completions wire format (OpenAI, OpenRouter, Ollama, vLLM, llama.cpp, LM Studio …).
//! It does not know about HTTP servers, stores or chat platforms.

mod agent;
pub mod openai;
mod sse;

pub use agent::{AgentConfig, BuiltinAgent};
pub use openai::{OpenAiConfig, OpenAiProvider, ProviderError};
