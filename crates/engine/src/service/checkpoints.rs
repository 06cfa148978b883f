//! Checkpoints around runs, and the API over them: list, diff, restore (see
//! [`crate::checkpoints`] for how they are kept).

use switchboard_protocol::{Checkpoint, CheckpointKind, DiffQuery, DiffStat, RestoreResponse};

use super::*;
use crate::checkpoints::CheckpointError;

/// Most bytes of a unified diff answered at once.
const MAX_DIFF_BYTES: usize = 4 * 1024 * 1024;
/// … with a bus, whose messages carry forwarded answers (NATS allows 1 MB by default, and
/// JSON escaping may double the text).
const MAX_DIFF_BYTES_BUS: usize = 400 * 1024;

/// A diff as asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffOutput {
    /// The unified diff (empty when nothing changed).
    Text(String),
    /// Per-file counts (`?stat=1`).
    Stat(DiffStat),
}

impl Engine {
    /// The checkpoint a run starts from, taken before it (`None` when checkpoints are off or
    /// the workspace cannot be checkpointed — said in a `Notice`, never a failed run).
    pub(super) async fn checkpoint_before(
        &self,
        session: &SessionRecord,
        run_id: Uuid,
        lease: &Lease,
    ) -> Option<String> {
        let cps = &self.inner.checkpoints;
        if !cps.enabled() {
            return None;
        }
        match cps
            .take(
                session.id,
                Path::new(&session.cwd),
                CheckpointKind::BeforeRun,
                Some(run_id),
            )
            .await
        {
            Ok(taken) => Some(taken.id),
            Err(e) => {
                self.checkpoint_notice(session.id, run_id, lease, &e).await;
                None
            }
        }
    }

    /// After a run: a checkpoint when the run changed files, and `WorkspaceChanged` saying
    /// how much (before the run's terminal event).
    pub(super) async fn checkpoint_after(
        &self,
        session: &SessionRecord,
        run_id: Uuid,
        lease: &Lease,
    ) {
        let taken = self
            .inner
            .checkpoints
            .take(
                session.id,
                Path::new(&session.cwd),
                CheckpointKind::AfterRun,
                Some(run_id),
            )
            .await;
        match taken {
            Ok(t) if t.created => {
                let event = AgentEvent::WorkspaceChanged {
                    run_id,
                    checkpoint: t.id,
                    files: t.files,
                    insertions: t.insertions,
                    deletions: t.deletions,
                };
                if let Err(e) = self
                    .inner
                    .log
                    .append_fenced(session.id, &event, Some(lease))
                    .await
                {
                    tracing::warn!(session_id = %session.id, %run_id, error = %e, "could not record the workspace change");
                }
            }
            Ok(_) => {}
            Err(e) => self.checkpoint_notice(session.id, run_id, lease, &e).await,
        }
    }

    async fn checkpoint_notice(
        &self,
        session_id: Uuid,
        run_id: Uuid,
        lease: &Lease,
        e: &CheckpointError,
    ) {
        tracing::warn!(%session_id, %run_id, error = %e, "no checkpoint of the workspace");
        let notice = AgentEvent::Notice {
            run_id,
            message: format!("no checkpoint of the workspace for this run: {e}"),
        };
        let _ = self
            .inner
            .log
            .append_fenced(session_id, &notice, Some(lease))
            .await;
    }

    /// Where the session's workspace checkpoints are: `Some(instance)` when that is another
    /// instance a bus reaches (the one that started the session's last run).
    async fn workspace_owner(&self, session_id: Uuid) -> Result<Option<String>, EngineError> {
        if self.inner.config.exclusive || self.inner.log.bus().is_none() {
            return Ok(None);
        }
        Ok(self
            .inner
            .store
            .workspace_instance(session_id)
            .await?
            .filter(|i| !i.is_empty() && *i != self.inner.config.instance_id))
    }

    /// Applies a checkpoint request on the instance that has the workspace: here, or
    /// forwarded there (as steering is).
    async fn on_workspace(
        &self,
        session_id: Uuid,
        control: RunControl,
    ) -> Result<ControlReply, EngineError> {
        self.record(session_id).await?;
        let (Some(owner), Some(bus)) = (
            self.workspace_owner(session_id).await?,
            self.inner.log.bus().cloned(),
        ) else {
            return self.apply_local(control).await;
        };
        tracing::debug!(%session_id, instance = %owner, "forwarding a checkpoint request");
        match bus.control(&owner, control).await {
            Ok(ControlReply::Error { code, message }) => Err(EngineError::Remote { code, message }),
            Ok(reply) => Ok(reply),
            Err(reason) => Err(EngineError::OwnerUnreachable {
                instance: owner,
                reason,
            }),
        }
    }

    /// The session's checkpoints, oldest first, from the instance that has its workspace.
    pub async fn checkpoints(&self, session_id: Uuid) -> Result<Vec<Checkpoint>, EngineError> {
        match self
            .on_workspace(session_id, RunControl::Checkpoints { session_id })
            .await?
        {
            ControlReply::Checkpoints { checkpoints } => Ok(checkpoints),
            other => Err(super::control::unexpected(other)),
        }
    }

    /// What changed (see [`Self::diff_local`]), from the instance that has the workspace.
    pub async fn diff(
        &self,
        session_id: Uuid,
        query: &DiffQuery,
    ) -> Result<DiffOutput, EngineError> {
        let control = RunControl::Diff {
            session_id,
            query: query.clone(),
        };
        match self.on_workspace(session_id, control).await? {
            ControlReply::Diff {
                stat: Some(stat), ..
            } => Ok(DiffOutput::Stat(stat)),
            ControlReply::Diff { text, .. } => Ok(DiffOutput::Text(text.unwrap_or_default())),
            other => Err(super::control::unexpected(other)),
        }
    }

    /// Puts the workspace back to checkpoint `id` (see [`Self::restore_local`]), on the
    /// instance that has it.
    pub async fn restore(
        &self,
        session_id: Uuid,
        id: &str,
    ) -> Result<RestoreResponse, EngineError> {
        let control = RunControl::Restore {
            session_id,
            checkpoint: id.to_owned(),
        };
        match self.on_workspace(session_id, control).await? {
            ControlReply::Restored { response } => Ok(response),
            other => Err(super::control::unexpected(other)),
        }
    }

    /// The session's checkpoints here, oldest first.
    pub(super) async fn checkpoints_local(
        &self,
        session_id: Uuid,
    ) -> Result<Vec<Checkpoint>, EngineError> {
        let session = self.record(session_id).await?;
        Ok(self
            .inner
            .checkpoints
            .list(session_id, Path::new(&session.cwd))
            .await?)
    }

    /// What changed: in a run (`run`), between two checkpoints (`from`, `to` — the latest by
    /// default), or, with neither, in the last run that changed files. Empty when nothing
    /// did.
    pub(super) async fn diff_local(
        &self,
        session_id: Uuid,
        query: &DiffQuery,
    ) -> Result<DiffOutput, EngineError> {
        let stat = match query.stat.as_deref() {
            None | Some("" | "0" | "false") => false,
            Some("1" | "true") => true,
            Some(other) => {
                return Err(EngineError::validation(
                    "stat",
                    format!("{other:?}: use 1 or 0"),
                ));
            }
        };
        let session = self.record(session_id).await?;
        // (Semantic, not shape: 422, as a schema cannot say them.)
        if query.run.is_some() && (query.from.is_some() || query.to.is_some()) {
            return Err(EngineError::Unprocessable(
                "give either run or from/to, not both".into(),
            ));
        }
        let cwd = Path::new(&session.cwd);
        let list = self.inner.checkpoints.list(session_id, cwd).await?;
        let after_run = |c: &&Checkpoint| c.kind == CheckpointKind::AfterRun;
        let range = if let Some(run) = query.run {
            if self
                .inner
                .store
                .get_run(run)
                .await?
                .is_none_or(|r| r.session_id != session_id)
            {
                return Err(EngineError::Unprocessable(format!(
                    "run {run} is not a run of this session"
                )));
            }
            list.iter()
                .filter(after_run)
                .find(|c| c.run_id == Some(run))
                .and_then(|c| Some((c.parent.clone()?, c.id.clone())))
        } else if let Some(from) = &query.from {
            let to = match &query.to {
                Some(to) => to.clone(),
                None => list
                    .last()
                    .map(|c| c.id.clone())
                    .ok_or(CheckpointError::NoCheckpoints)?,
            };
            Some((from.clone(), to))
        } else if query.to.is_some() {
            return Err(EngineError::Unprocessable("`to` needs `from`".into()));
        } else {
            switchboard_protocol::last_change(&list)
                .and_then(|c| Some((c.parent.clone()?, c.id.clone())))
        };
        let cps = &self.inner.checkpoints;
        let max_diff = if self.inner.log.bus().is_some() {
            MAX_DIFF_BYTES_BUS
        } else {
            MAX_DIFF_BYTES
        };
        Ok(match (range, stat) {
            (None, false) => DiffOutput::Text(String::new()),
            (None, true) => DiffOutput::Stat(DiffStat {
                from: String::new(),
                to: String::new(),
                files: Vec::new(),
                insertions: 0,
                deletions: 0,
            }),
            (Some((from, to)), false) => {
                DiffOutput::Text(cps.diff(session_id, cwd, &from, &to, max_diff).await?)
            }
            (Some((from, to)), true) => {
                DiffOutput::Stat(cps.stat(session_id, cwd, &from, &to).await?)
            }
        })
    }

    /// Puts the session's workspace back to checkpoint `id` (checkpointing it first, so the
    /// restore can be undone). Refused while a run is going on; no run starts meanwhile.
    pub(super) async fn restore_local(
        &self,
        session_id: Uuid,
        id: &str,
    ) -> Result<RestoreResponse, EngineError> {
        let session = self.record(session_id).await?;
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        if self.active_run_id(session_id).is_some()
            || self.inner.store.active_run(session_id).await?.is_some()
        {
            return Err(EngineError::SessionAlreadyRunning(session_id));
        }
        Ok(self
            .inner
            .checkpoints
            .restore(session_id, Path::new(&session.cwd), id)
            .await?)
    }
}
