//! Reading platform payloads strictly: what a platform sends as an object must be one.
//!
//! serde builds a struct from a JSON array too, field by position, so `"from": [42]` would
//! be read as a user with id 42 and `"author": ["1", "x"]` as a user `1` named `x`. No
//! platform sends that; a payload shaped so is garbage or forged, and must be refused, not
//! guessed at. Every object-typed field of a platform's wire types is therefore read
//! through these (`#[serde(deserialize_with = "...")]`), and every payload through
//! [`from_object`].

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde_json::{Map, Value};

/// An object-typed field: a JSON object, or an error.
pub(crate) fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    let map = Map::<String, Value>::deserialize(d)?;
    T::deserialize(Value::Object(map)).map_err(D::Error::custom)
}

/// An optional object-typed field: absent or null is `None`, an object is read, anything
/// else is an error.
pub(crate) fn object_opt<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    match Option::<Map<String, Value>>::deserialize(d)? {
        Some(map) => T::deserialize(Value::Object(map))
            .map(Some)
            .map_err(D::Error::custom),
        None => Ok(None),
    }
}

/// An array of objects: an array whose every item is a JSON object, or an error.
pub(crate) fn objects<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Vec::<Map<String, Value>>::deserialize(d)?
        .into_iter()
        .map(|map| T::deserialize(Value::Object(map)).map_err(D::Error::custom))
        .collect()
}

/// An optional array of objects: absent or null is `None`, else as [`objects`].
pub(crate) fn objects_opt<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    match Option::<Vec<Map<String, Value>>>::deserialize(d)? {
        Some(items) => items
            .into_iter()
            .map(|map| T::deserialize(Value::Object(map)).map_err(D::Error::custom))
            .collect::<Result<Vec<T>, _>>()
            .map(Some),
        None => Ok(None),
    }
}

/// A whole payload: a JSON object read as `T`, or why not.
pub(crate) fn from_object<T: DeserializeOwned>(v: Value) -> Result<T, String> {
    match v {
        Value::Object(_) => serde_json::from_value(v).map_err(|e| e.to_string()),
        other => Err(format!("{}, not an object", kind_of(&other))),
    }
}

/// What a JSON value is, for messages ("an array", "a string", ...).
pub(crate) use switchboard_protocol::error::json_kind as kind_of;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    struct User {
        id: i64,
        #[serde(default)]
        name: String,
    }

    #[derive(Debug, Deserialize)]
    struct Msg {
        #[serde(deserialize_with = "object")]
        from: User,
        #[serde(default, deserialize_with = "object_opt")]
        to: Option<User>,
        #[serde(default, deserialize_with = "objects")]
        cc: Vec<User>,
        #[serde(default, deserialize_with = "objects_opt")]
        bcc: Option<Vec<User>>,
    }

    #[test]
    fn objects_are_read_and_arrays_in_their_place_refused() {
        let ok = json!({"from": {"id": 1}, "to": {"id": 2, "name": "b"}, "cc": [{"id": 3}],
            "bcc": [{"id": 4}]});
        let m: Msg = from_object(ok.clone()).unwrap();
        assert_eq!(
            m.from,
            User {
                id: 1,
                name: String::new()
            }
        );
        assert_eq!(m.to.unwrap().name, "b");
        assert_eq!(m.cc[0].id, 3);
        assert_eq!(m.bcc.unwrap()[0].id, 4);
        // Without the helpers serde takes every one of these as a user.
        for (pointer, array) in [
            ("/from", json!([1, "a"])),
            ("/to", json!([2])),
            ("/cc/0", json!([3])),
            ("/bcc/0", json!([4])),
        ] {
            let mut bad = ok.clone();
            *bad.pointer_mut(pointer).unwrap() = array;
            assert!(from_object::<Msg>(bad.clone()).is_err(), "{bad}");
        }
        let absent: Msg = from_object(json!({"from": {"id": 1}, "to": null})).unwrap();
        assert!(absent.to.is_none() && absent.cc.is_empty() && absent.bcc.is_none());
        let err = from_object::<Msg>(json!([{"id": 1}])).unwrap_err();
        assert_eq!(err, "an array, not an object");
    }
}
