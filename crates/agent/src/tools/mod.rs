//! The built-in agent's workspace tools. (Being written.)
