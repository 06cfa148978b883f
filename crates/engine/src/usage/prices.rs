//! What a model call costs: a built-in price table for common models, extended and
//! overridden by `[prices."provider/model"]`, and the cost of a call in micro-dollars as a
//! pure function of its usage — integers all the way, rounded up once per call, so that a
//! report's totals are exact sums of its calls.

use std::collections::HashMap;

use switchboard_protocol::Usage;
use switchboard_protocol::usage::{ModelPrice, usd_to_micros};

/// When the built-in table was taken from the providers' published price lists. Prices
/// change: `[prices]` in the configuration overrides any of them.
pub const PRICES_TAKEN: &str = "2025-08-01";

/// Dollars per million tokens: input, output, cache read, cache write.
const BUILTIN: &[(&str, f64, f64, f64, f64)] = &[
    // OpenAI: cached input at its discount; writing the cache costs nothing extra.
    ("openai/gpt-5", 1.25, 10.0, 0.125, 1.25),
    ("openai/gpt-5-mini", 0.25, 2.0, 0.025, 0.25),
    ("openai/gpt-5-nano", 0.05, 0.40, 0.005, 0.05),
    ("openai/gpt-4.1", 2.0, 8.0, 0.50, 2.0),
    ("openai/gpt-4.1-mini", 0.40, 1.60, 0.10, 0.40),
    ("openai/gpt-4.1-nano", 0.10, 0.40, 0.025, 0.10),
    ("openai/gpt-4o", 2.50, 10.0, 1.25, 2.50),
    ("openai/gpt-4o-mini", 0.15, 0.60, 0.075, 0.15),
    ("openai/o3", 2.0, 8.0, 0.50, 2.0),
    ("openai/o3-mini", 1.10, 4.40, 0.55, 1.10),
    ("openai/o4-mini", 1.10, 4.40, 0.275, 1.10),
    // Anthropic: cache reads at a tenth, 5-minute cache writes at 1.25 times input.
    ("anthropic/claude-opus-4-1", 15.0, 75.0, 1.50, 18.75),
    ("anthropic/claude-opus-4", 15.0, 75.0, 1.50, 18.75),
    ("anthropic/claude-sonnet-4-5", 3.0, 15.0, 0.30, 3.75),
    ("anthropic/claude-sonnet-4", 3.0, 15.0, 0.30, 3.75),
    ("anthropic/claude-3-7-sonnet", 3.0, 15.0, 0.30, 3.75),
    ("anthropic/claude-3-5-sonnet", 3.0, 15.0, 0.30, 3.75),
    ("anthropic/claude-haiku-4-5", 1.0, 5.0, 0.10, 1.25),
    ("anthropic/claude-3-5-haiku", 0.80, 4.0, 0.08, 1.0),
    ("anthropic/claude-3-haiku", 0.25, 1.25, 0.03, 0.30),
];

/// A price in micro-dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl From<&ModelPrice> for Price {
    fn from(p: &ModelPrice) -> Self {
        Self {
            input: usd_to_micros(p.input),
            output: usd_to_micros(p.output),
            cache_read: usd_to_micros(p.cache_read.unwrap_or(p.input)),
            cache_write: usd_to_micros(p.cache_write.unwrap_or(p.input)),
        }
    }
}

impl Price {
    /// The cost of `usage` in micro-dollars, rounded up (a call that used anything costs
    /// at least what it used, never a fraction lost to rounding).
    pub fn cost(&self, usage: &Usage) -> u64 {
        let cached = usage.cache_read_tokens + usage.cache_write_tokens;
        let plain_input = usage.prompt_tokens.saturating_sub(cached);
        let millionths = u128::from(plain_input) * u128::from(self.input)
            + u128::from(usage.completion_tokens) * u128::from(self.output)
            + u128::from(usage.cache_read_tokens) * u128::from(self.cache_read)
            + u128::from(usage.cache_write_tokens) * u128::from(self.cache_write);
        u64::try_from(millionths.div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }
}

/// The prices in force: the built-in table with the configuration's on top.
#[derive(Debug, Clone, Default)]
pub struct Prices {
    table: HashMap<String, Price>,
}

impl Prices {
    /// The built-in table with `overrides` (`provider/model` → price) on top.
    pub fn new(overrides: &HashMap<String, ModelPrice>) -> Self {
        let mut table: HashMap<String, Price> = BUILTIN
            .iter()
            .map(|(k, i, o, r, w)| {
                (
                    (*k).to_string(),
                    Price {
                        input: usd_to_micros(*i),
                        output: usd_to_micros(*o),
                        cache_read: usd_to_micros(*r),
                        cache_write: usd_to_micros(*w),
                    },
                )
            })
            .collect();
        for (k, p) in overrides {
            table.insert(k.clone(), Price::from(p));
        }
        Self { table }
    }

    /// The price of `model` at `provider`: its own entry, else the longest entry it extends
    /// with a version or date (`claude-sonnet-4-20250514` → `claude-sonnet-4`,
    /// `gpt-4o-2024-08-06` → `gpt-4o`); none when the model is not known.
    pub fn lookup(&self, provider: &str, model: &str) -> Option<Price> {
        let key = format!("{provider}/{model}");
        if let Some(p) = self.table.get(&key) {
            return Some(*p);
        }
        self.table
            .iter()
            .filter(|(k, _)| {
                key.strip_prefix(k.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .max_by_key(|(k, _)| k.len())
            .map(|(_, p)| *p)
    }

    /// The cost of a call, when the model has a price.
    pub fn cost(&self, provider: &str, model: &str, usage: &Usage) -> Option<u64> {
        self.lookup(provider, model).map(|p| p.cost(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, read: u64, write: u64) -> Usage {
        Usage {
            cache_read_tokens: read,
            cache_write_tokens: write,
            ..Usage::tokens(input, output)
        }
    }

    #[test]
    fn a_call_costs_its_tokens_at_their_prices_in_whole_micros() {
        let prices = Prices::new(&HashMap::new());
        // gpt-4o: $2.50 in, $10 out per million → 2.5 and 10 µ$ a token.
        assert_eq!(
            prices.cost("openai", "gpt-4o", &usage(1_000, 100, 0, 0)),
            Some(2_500 + 1_000)
        );
        // Cached input at its own price: 400 plain at 2.5, 600 cached at 1.25.
        assert_eq!(
            prices.cost("openai", "gpt-4o", &usage(1_000, 0, 600, 0)),
            Some(1_000 + 750)
        );
        // Anthropic's cache writes at 3.75 µ$ a token.
        assert_eq!(
            prices.cost("anthropic", "claude-sonnet-4", &usage(1_000, 0, 0, 1_000)),
            Some(3_750)
        );
        // One token of gpt-5-nano input is 0.05 µ$: rounded up to 1, never lost.
        assert_eq!(
            prices.cost("openai", "gpt-5-nano", &usage(1, 0, 0, 0)),
            Some(1)
        );
        assert_eq!(
            prices.cost("openai", "gpt-5-nano", &usage(0, 0, 0, 0)),
            Some(0)
        );
    }

    #[test]
    fn dated_models_take_their_family_s_price_and_unknown_ones_none() {
        let prices = Prices::new(&HashMap::new());
        assert_eq!(
            prices.lookup("anthropic", "claude-sonnet-4-20250514"),
            prices.lookup("anthropic", "claude-sonnet-4")
        );
        assert_eq!(
            prices.lookup("openai", "gpt-4o-2024-08-06"),
            prices.lookup("openai", "gpt-4o")
        );
        // `gpt-4o-mini` is its own model, not a dated `gpt-4o`.
        assert_ne!(
            prices.lookup("openai", "gpt-4o-mini"),
            prices.lookup("openai", "gpt-4o")
        );
        assert_eq!(prices.lookup("openai", "llama3.1:8b"), None);
        assert_eq!(prices.lookup("anthropic", "gpt-4o"), None, "by provider");
    }

    #[test]
    fn configuration_overrides_and_extends_the_table() {
        let mut over = HashMap::new();
        over.insert(
            "openai/gpt-4o".to_string(),
            ModelPrice {
                input: 1.0,
                output: 2.0,
                cache_read: None,
                cache_write: None,
            },
        );
        over.insert(
            "openai/llama3".to_string(),
            ModelPrice {
                input: 0.0,
                output: 0.0,
                cache_read: None,
                cache_write: None,
            },
        );
        let prices = Prices::new(&over);
        assert_eq!(
            prices.cost("openai", "gpt-4o", &usage(1_000_000, 1_000_000, 0, 0)),
            Some(3_000_000)
        );
        assert_eq!(
            prices.cost("openai", "llama3", &usage(5, 5, 0, 0)),
            Some(0),
            "a free local model is priced, at nothing"
        );
    }
}
