//! Anthropic Messages API, streaming. (Being written.)
