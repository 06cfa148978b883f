//! Workspace checkpoints: what a run changed, and going back.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// Before a run, when the workspace differed from the session's last checkpoint (the
    /// first run, or files changed between runs).
    BeforeRun,
    /// After a run that changed files.
    AfterRun,
    /// Before a restore: what the restore replaced (restore it to undo the restore).
    BeforeRestore,
    /// The state a restore produced.
    Restored,
}

/// One checkpoint of a session's workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Checkpoint {
    /// The checkpoint's id (a commit of the shadow repository: 40 hex digits).
    #[schema(pattern = "^[0-9a-f]{40}$")]
    pub id: String,
    pub kind: CheckpointKind,
    /// The run it belongs to (none for a restore's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    /// The checkpoint before it in this session (none for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Changes since `parent`: files changed, lines added, lines removed.
    pub files: u32,
    pub insertions: u64,
    pub deletions: u64,
    /// Files left out for their size (over `[checkpoints] max_file_mb`), relative paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// `GET /v1/sessions/{id}/checkpoints`: oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ListCheckpointsResponse {
    pub checkpoints: Vec<Checkpoint>,
}

/// `GET /v1/sessions/{id}/diff`: which change. `run` (what that run changed) or `from` and
/// `to` (checkpoint ids; `to` defaults to the latest); with neither, the last run that
/// changed files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DiffQuery {
    pub run: Option<Uuid>,
    pub from: Option<String>,
    pub to: Option<String>,
    /// `1` (or `true`): per-file counts as JSON instead of the unified diff.
    #[param(pattern = "^(|0|1|true|false)$")]
    pub stat: Option<String>,
}

/// One file of a diff's stat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FileStat {
    pub path: String,
    /// Lines added and removed (0 for a binary file).
    pub insertions: u64,
    pub deletions: u64,
    pub binary: bool,
}

/// `GET /v1/sessions/{id}/diff?stat=1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DiffStat {
    pub from: String,
    pub to: String,
    pub files: Vec<FileStat>,
    pub insertions: u64,
    pub deletions: u64,
}

/// `POST /v1/sessions/{id}/checkpoints/{cp}/restore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RestoreResponse {
    /// The checkpoint the workspace is now at.
    pub restored: String,
    /// The checkpoint taken just before (restore it to undo this restore).
    pub backup: String,
    /// What the restore changed: files, lines added, lines removed.
    pub files: u32,
    pub insertions: u64,
    pub deletions: u64,
}

/// The checkpoint left by the last run that changed files (its `parent` is what undoing
/// that run restores): the one rule `diff` with no range, `switchboard undo` and the chats'
/// `/undo` share.
pub fn last_change(checkpoints: &[Checkpoint]) -> Option<&Checkpoint> {
    checkpoints
        .iter()
        .rev()
        .find(|c| c.kind == CheckpointKind::AfterRun)
}

/// `3 files changed, +40 −2`: how every surface sums up a change.
pub fn change_summary(files: u32, insertions: u64, deletions: u64) -> String {
    let s = if files == 1 { "" } else { "s" };
    format!("{files} file{s} changed, +{insertions} −{deletions}")
}
