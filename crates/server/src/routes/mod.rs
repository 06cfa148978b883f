//! One router per resource.

pub mod approvals;
pub mod checkpoints;
pub mod events;
pub mod files;
pub mod health;
pub mod messages;
pub mod metrics;
pub mod openai;
pub mod people;
pub mod search;
pub mod sessions;
pub mod settings;
pub mod tools;
pub mod usage;
