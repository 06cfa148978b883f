//! What a fake platform was asked, in order: one log shared by every fake, so that tests
//! read calls the same way on each (and can assert on the exact sequence of posts and edits).

use std::time::Instant;

use serde_json::Value;

/// Every call a fake received, refused ones too, in arrival order.
#[derive(Debug, Default, Clone)]
pub struct CallLog {
    /// (when it arrived, what was called — a method name or a `METHOD /route` —, its params).
    calls: Vec<(Instant, String, Value)>,
}

impl CallLog {
    /// Records a call that arrives now.
    pub fn push(&mut self, what: &str, params: Value) {
        self.calls.push((Instant::now(), what.to_owned(), params));
    }

    /// The params of every call `what` equals.
    pub fn of(&self, what: &str) -> Vec<Value> {
        self.matching(|w| w == what)
    }

    /// The params of every call whose name starts with `prefix`.
    pub fn starting_with(&self, prefix: &str) -> Vec<Value> {
        self.matching(|w| w.starts_with(prefix))
    }

    fn matching(&self, f: impl Fn(&str) -> bool) -> Vec<Value> {
        self.calls
            .iter()
            .filter(|(_, w, _)| f(w))
            .map(|(_, _, p)| p.clone())
            .collect()
    }

    /// Every call: when, what, params.
    pub fn timeline(&self) -> Vec<(Instant, String, Value)> {
        self.calls.clone()
    }
}
