//! The Bot API's wire types (only the fields used).

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde_json::{Map, Value};

// The Bot API sends objects. serde would also build a struct from an array, field by
// position (`"from": [42]` as a user with id 42), so every object-typed field of an
// update is read through these: an object, or the update is refused.

/// An object-typed field: a JSON object, or an error.
fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    let map = Map::<String, Value>::deserialize(d)?;
    T::deserialize(Value::Object(map)).map_err(D::Error::custom)
}

/// An optional object-typed field: absent or null is `None`, an object is read, anything
/// else is an error.
fn object_opt<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    match Option::<Map<String, Value>>::deserialize(d)? {
        Some(map) => T::deserialize(Value::Object(map))
            .map(Some)
            .map_err(D::Error::custom),
        None => Ok(None),
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiAnswer {
    pub(super) ok: bool,
    #[serde(default)]
    pub(super) result: Option<Value>,
    #[serde(default)]
    pub(super) error_code: Option<i64>,
    #[serde(default)]
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) parameters: Option<ApiParameters>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiParameters {
    #[serde(default)]
    pub(super) retry_after: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiUpdate {
    pub(super) update_id: i64,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) message: Option<ApiMessage>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) callback_query: Option<ApiCallbackQuery>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiUser {
    pub(super) id: i64,
    #[serde(default)]
    pub(super) is_bot: bool,
    #[serde(default)]
    pub(super) first_name: String,
    #[serde(default)]
    pub(super) last_name: Option<String>,
    #[serde(default)]
    pub(super) username: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiChat {
    pub(super) id: i64,
    #[serde(rename = "type")]
    pub(super) kind: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiEntity {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) offset: usize,
    pub(super) length: usize,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) user: Option<ApiUser>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiPhotoSize {
    #[serde(default)]
    pub(super) file_id: String,
    #[serde(default)]
    pub(super) width: Option<u64>,
    #[serde(default)]
    pub(super) height: Option<u64>,
    #[serde(default)]
    pub(super) file_size: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiFile {
    #[serde(default)]
    pub(super) file_id: String,
    #[serde(default)]
    pub(super) file_name: Option<String>,
    #[serde(default)]
    pub(super) mime_type: Option<String>,
    #[serde(default)]
    pub(super) file_size: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiMessage {
    pub(super) message_id: i64,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) from: Option<ApiUser>,
    #[serde(deserialize_with = "object")]
    pub(super) chat: ApiChat,
    #[serde(default)]
    pub(super) message_thread_id: Option<i64>,
    #[serde(default)]
    pub(super) is_topic_message: Option<bool>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) reply_to_message: Option<Box<ApiMessage>>,
    #[serde(default)]
    pub(super) forum_topic_created: Option<Value>,
    #[serde(default)]
    pub(super) text: Option<String>,
    #[serde(default)]
    pub(super) entities: Option<Vec<ApiEntity>>,
    #[serde(default)]
    pub(super) caption: Option<String>,
    #[serde(default)]
    pub(super) caption_entities: Option<Vec<ApiEntity>>,
    #[serde(default)]
    pub(super) photo: Option<Vec<ApiPhotoSize>>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) document: Option<ApiFile>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) voice: Option<ApiFile>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) audio: Option<ApiFile>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) video: Option<ApiFile>,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) video_note: Option<ApiFile>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ApiCallbackQuery {
    pub(super) id: String,
    #[serde(deserialize_with = "object")]
    pub(super) from: ApiUser,
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) message: Option<ApiMessage>,
    #[serde(default)]
    pub(super) data: Option<String>,
}
