//! Shared fakes for Switchboard's tests.
//!
//! This crate owns the test doubles that several crates' tests need, so each speaks its wire
//! format once and well: [`mock_llm::MockLlm`], an OpenAI-compatible and Anthropic Messages server on
//! real TCP with scripted replies (text, tool calls, errors, broken streams, hangs), and
//! [`process::ServerProcess`], which runs the `switchboard` binary as a child process for
//! end-to-end tests, [`postgres::TestDatabase`], a throwaway database on the test server, and
//! [`faulty_store::FaultyStore`], a store that fails, hangs or slows down on cue. It is test-only code, used as a dev-dependency.

pub mod call_log;
pub mod fake_discord;
pub mod fake_mattermost;
pub mod fake_signal;
pub mod fake_slack;
pub mod fake_teams;
pub mod fake_telegram;
pub mod fake_whatsapp;
pub mod faulty_store;
pub mod gcra;
pub mod mock_llm;
pub mod postgres;
pub mod process;
pub mod serve;
pub mod wait;
