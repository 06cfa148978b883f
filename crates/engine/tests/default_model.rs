#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The defaults changed while serving: new sessions get the new model and permission mode,
//! and new runs of sessions naming no model the new model; a session that named one keeps it.

use std::sync::Arc;

use switchboard_engine::{
    Backend, BackendError, Backends, Engine, EngineConfig, RunContext, RunSummary,
};
use switchboard_protocol::{CreateSessionRequest, PermissionMode, SendMessageRequest};
use switchboard_store::SqlStore;

/// Records, per run, the session's model and the default the run was given.
/// A run as the backend saw it: the session's model, the default, the permission mode.
type Seen = (Option<String>, Option<String>, PermissionMode);

#[derive(Default)]
struct Recorder(parking_lot::Mutex<Vec<Seen>>);

#[async_trait::async_trait]
impl Backend for Recorder {
    async fn run(&self, ctx: RunContext) -> Result<RunSummary, BackendError> {
        self.0.lock().push((
            ctx.config.model.clone(),
            ctx.default_model.clone(),
            ctx.config.permission_mode,
        ));
        Ok(RunSummary {
            stop_reason: "completed".into(),
            total_turns: 1,
            usage: Default::default(),
        })
    }
}

const READ_ONLY: PermissionMode = PermissionMode::ReadOnly;
const WORKSPACE_WRITE: PermissionMode = PermissionMode::WorkspaceWrite;

fn message(text: &str) -> SendMessageRequest {
    serde_json::from_value(serde_json::json!({ "message": {"role": "user", "content": text} }))
        .unwrap()
}

#[tokio::test]
async fn a_new_default_model_reaches_new_sessions_and_new_runs_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqlStore::open_path(&dir.path().join("db")).await.unwrap());
    let recorder = Arc::new(Recorder::default());
    let backends = Backends {
        builtin: Some(recorder.clone()),
        ..Backends::default()
    };
    let engine = Engine::start(
        store,
        backends,
        EngineConfig {
            default_cwd: dir.path().to_path_buf(),
            default_model: Some("first".into()),
            files_dir: dir.path().join("files"),
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(engine.default_model().as_deref(), Some("first"));
    let old = engine
        .create_session(CreateSessionRequest::default())
        .await
        .unwrap();
    let named = engine
        .create_session(CreateSessionRequest {
            model: Some("mine".into()),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap();

    engine.set_defaults(switchboard_engine::SessionDefaults {
        model: Some("second".into()),
        permission_mode: READ_ONLY,
    });
    let new = engine
        .create_session(CreateSessionRequest::default())
        .await
        .unwrap();
    for s in [&old, &named, &new] {
        engine.send_message(s.id, message("hi")).await.unwrap();
        engine.wait_idle(s.id).await;
    }
    let runs = recorder.0.lock().clone();
    assert_eq!(
        runs,
        vec![
            // Created under the first defaults: it recorded them.
            (Some("first".into()), Some("second".into()), WORKSPACE_WRITE),
            (Some("mine".into()), Some("second".into()), WORKSPACE_WRITE),
            (Some("second".into()), Some("second".into()), READ_ONLY),
        ]
    );
}
