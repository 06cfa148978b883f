//! `null` means absent: the one rule for optional request fields.
//!
//! Clients serialize "no value" as `null` as often as they leave a field out (the stakpak
//! gateway's client sends `"context": null`, `"model": null` … on every message). serde
//! already reads `null` as `None` for an `Option` field with `#[serde(default)]`; a field
//! whose type has a default instead (a `Vec`, a `bool`, an enum with a default variant) needs
//! this helper, or `null` is a type error:
//!
//! ```
//! # use serde::Deserialize;
//! #[derive(Deserialize)]
//! struct Body {
//!     #[serde(default, deserialize_with = "switchboard_protocol::nullable::or_default")]
//!     tags: Vec<String>,
//! }
//! let b: Body = serde_json::from_str(r#"{"tags": null}"#).unwrap();
//! assert!(b.tags.is_empty());
//! ```
//!
//! Put `#[schema(nullable)]` next to it so the OpenAPI document says so too (an `Option`
//! field is nullable there by itself).

use serde::{Deserialize, Deserializer};

/// Reads the field's value, or its `Default` when it is `null`.
pub fn or_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    or_else(d, T::default)
}

/// Reads the field's value, or `fallback()` when it is `null`: for a field whose default is
/// not its type's `Default` (pair it with the same function in `#[serde(default = …)]`).
pub fn or_else<'de, D, T>(d: D, fallback: impl FnOnce() -> T) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_else(fallback))
}

/// An optional field whose value is an object: `null` is absent, and anything but an object
/// is refused (serde alone reads a struct from an array too: `[null, null]` would be a
/// struct of two absent fields).
pub fn object<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error as _;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(None),
        v @ serde_json::Value::Object(_) => serde_json::from_value(v)
            .map(Some)
            .map_err(D::Error::custom),
        other => Err(D::Error::custom(format!(
            "expected an object, not {}",
            crate::error::json_kind(&other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Body {
        #[serde(default, deserialize_with = "super::or_default")]
        list: Vec<u32>,
        #[serde(default, deserialize_with = "super::or_default")]
        flag: bool,
        #[serde(default = "seven", deserialize_with = "seven_or_null")]
        n: u32,
    }

    fn seven() -> u32 {
        7
    }

    fn seven_or_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        super::or_else(d, seven)
    }

    #[test]
    fn null_missing_and_present() {
        let all_null: Body = serde_json::from_str(r#"{"list":null,"flag":null,"n":null}"#).unwrap();
        let missing: Body = serde_json::from_str("{}").unwrap();
        assert_eq!(all_null, missing);
        assert_eq!(
            missing,
            Body {
                list: vec![],
                flag: false,
                n: 7
            }
        );
        let set: Body = serde_json::from_str(r#"{"list":[1],"flag":true,"n":2}"#).unwrap();
        assert_eq!(
            set,
            Body {
                list: vec![1],
                flag: true,
                n: 2
            }
        );
        // A wrong type is still an error, not silently the default.
        assert!(serde_json::from_str::<Body>(r#"{"list":"x"}"#).is_err());
    }
}
