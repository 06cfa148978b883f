//! The Bot API's wire types (only the fields used).

use serde::Deserialize;
use serde_json::Value;

// Every object-typed field is read strictly: see `platform::wire`.
use crate::platform::wire::{object, object_opt, objects_opt};

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
    /// An edit of a message sent before: noted in the ledger, not acted on.
    #[serde(default, deserialize_with = "object_opt")]
    pub(super) edited_message: Option<ApiMessage>,
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
    #[serde(default, deserialize_with = "objects_opt")]
    pub(super) entities: Option<Vec<ApiEntity>>,
    #[serde(default)]
    pub(super) caption: Option<String>,
    #[serde(default, deserialize_with = "objects_opt")]
    pub(super) caption_entities: Option<Vec<ApiEntity>>,
    #[serde(default, deserialize_with = "objects_opt")]
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
